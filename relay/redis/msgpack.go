package redis

import (
	"errors"
	"fmt"
	"math"

	"github.com/chronoscron/chronos/relay"
)

// errPack is a packed row this engine did not write.
var errPack = errors.New("redis: malformed packed row")

// unpackArray decodes the MessagePack the scripts write for a row (cmsgpack:
// one array of strings and integers) into the shapes of a script reply:
// strings and int64s. It reads only that subset, from the bytes of a
// reply or of the string go-redis made of one (strings of the result are
// then parts of it, not copies).
func unpackArray[B string | []byte](b B) ([]any, error) {
	n, b, err := unpackArrayHeader(b)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, n)
	for range n {
		v, rest, err := unpackValue(b)
		if err != nil {
			return nil, err
		}
		out, b = append(out, v), rest
	}
	return out, nil
}

// unpackArrayHeader reads the header of an array: its length and the rest.
func unpackArrayHeader[B string | []byte](b B) (int, B, error) {
	switch {
	case len(b) >= 1 && b[0] >= 0x90 && b[0] <= 0x9f:
		return int(b[0] & 0x0f), b[1:], nil
	case len(b) >= 3 && b[0] == 0xdc:
		return int(b[1])<<8 | int(b[2]), b[3:], nil
	default:
		return 0, b, fmt.Errorf("%w: no array", errPack)
	}
}

// unpackValue decodes one string or integer.
func unpackValue[B string | []byte](b B) (any, B, error) {
	v, rest, err := unpackScalar(b)
	if err != nil {
		return nil, rest, err
	}
	if v.isStr {
		return string(v.s), rest, nil
	}
	return v.n, rest, nil
}

// scalar is one decoded string or integer.
type scalar[B string | []byte] struct {
	s     B
	n     int64
	isStr bool
}

// unpackScalar decodes one string or integer and returns the rest.
func unpackScalar[B string | []byte](b B) (scalar[B], B, error) {
	var v scalar[B]
	if len(b) == 0 {
		return v, b, errPack
	}
	c := b[0]
	b = b[1:]
	size := 0
	switch {
	case c <= 0x7f:
		v.n = int64(c)
		return v, b, nil
	case c >= 0xe0:
		v.n = int64(int8(c))
		return v, b, nil
	case c >= 0xa0 && c <= 0xbf:
		return unpackStr(b, int(c&0x1f))
	case c == 0xd9 || c == 0xcc || c == 0xd0:
		size = 1
	case c == 0xda || c == 0xcd || c == 0xd1:
		size = 2
	case c == 0xdb || c == 0xce || c == 0xd2:
		size = 4
	case c == 0xcf || c == 0xd3 || c == 0xcb:
		size = 8
	default:
		return v, b, fmt.Errorf("%w: type 0x%02x", errPack, c)
	}
	if len(b) < size {
		return v, b, errPack
	}
	var u uint64
	for i := range size {
		u = u<<8 | uint64(b[i])
	}
	b = b[size:]
	if c == 0xd9 || c == 0xda || c == 0xdb {
		return unpackStr(b, int(u))
	}
	n, err := unpackInt(c, u)
	v.n = n
	return v, b, err
}

// unpackStr takes a string of n bytes off b.
func unpackStr[B string | []byte](b B, n int) (scalar[B], B, error) {
	if n < 0 || len(b) < n {
		return scalar[B]{}, b, errPack
	}
	return scalar[B]{s: b[:n], isStr: true}, b[n:], nil
}

// unpackInt reads the integer of type c whose big-endian bits are u.
func unpackInt(c byte, u uint64) (int64, error) {
	switch c {
	case 0xcc, 0xcd, 0xce:
		return int64(u), nil
	case 0xcf:
		if u > math.MaxInt64 {
			return 0, errPack
		}
		return int64(u), nil
	case 0xd0:
		return int64(int8(u)), nil
	case 0xd1:
		return int64(int16(u)), nil
	case 0xd2:
		return int64(int32(u)), nil
	case 0xd3:
		return int64(u), nil
	default: // 0xcb: a float64 holding an integer
		f := math.Float64frombits(u)
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, fmt.Errorf("%w: non-integer number", errPack)
		}
		return int64(f), nil
	}
}

// packLastFire appends a last fire record (see lastfire.go), not yet
// reported, packed as the scripts' cmsgpack packs it, so that scripts store
// it as it comes.
func packLastFire(b []byte, f relay.LastFire) []byte {
	b = append(b, 0x99) // an array of 9
	b = packStr(b, f.ScheduleID)
	b = packStr(b, f.InstanceID)
	b = packStr(b, f.CallbackURL)
	b = packInt(b, f.FireAt.UnixMilli())
	b = packInt(b, int64(f.FireAt.Nanosecond()%1e6))
	b = packStr(b, f.Outcome)
	b = packStr(b, f.Reason)
	b = packInt(b, f.At.UnixMilli())
	return packInt(b, 0)
}

// packStr appends s in the shortest MessagePack string form, as cmsgpack.
func packStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= 0xff:
		b = append(b, 0xd9, byte(n))
	case n <= 0xffff:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

// packInt appends v in the shortest MessagePack integer form, as cmsgpack.
func packInt(b []byte, v int64) []byte {
	switch {
	case v >= 0 && v <= 0x7f:
		return append(b, byte(v))
	case v >= 0 && v <= 0xff:
		return append(b, 0xcc, byte(v))
	case v >= 0 && v <= 0xffff:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v >= 0 && v <= 0xffffffff:
		return append(b, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	case v >= 0:
		return append(b, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= -0x80:
		return append(b, 0xd0, byte(v))
	case v >= -0x8000:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= -0x80000000:
		return append(b, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(b, 0xd3, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

// packLeasedRow appends the row of lease l as the claim script packed it
// (see the row layout in scripts.go): an ack sends it so that its script
// can recognise an unchanged row by comparing bytes instead of unpacking
// it. It appends nothing for a lease without a token (no claim wrote that
// row).
func packLeasedRow(b []byte, l relay.Lease) []byte {
	if l.Token == 0 {
		return b
	}
	fms := l.FireAt.UnixMilli()
	flex := durMs(l.Flex)
	n := byte(rowFields)
	switch {
	case l.Direct.IsDirect():
		n = rowFieldsMax
	case flex > 0:
		n = rowFieldsFlex
	case l.FireAtSpelling != "":
		n++
	}
	b = append(b, 0x90|n)
	b = packStr(b, l.ScheduleID)
	b = packStr(b, l.InstanceID)
	b = packInt(b, fms)
	b = packInt(b, int64(l.FireAt.Nanosecond()%1e6))
	b = packStr(b, l.CallbackURL)
	b = packInt(b, int64(l.Attempt))
	b = packInt(b, l.Token)
	b = packInt(b, l.DueAt.UnixMilli()-fms)
	b = packInt(b, fms-l.CreatedAt.UnixMilli())
	b = packStr(b, l.LastError)
	if n > rowFields {
		b = packStr(b, l.FireAtSpelling)
	}
	if n >= rowFieldsFlex {
		b = packInt(b, flex)
	}
	if n == rowFieldsMax {
		b = packStr(b, l.Direct.Sealed)
		b = packStr(b, l.Direct.KeyID)
		b = packInt(b, l.Direct.MintedAt.UnixMilli())
	}
	return b
}
