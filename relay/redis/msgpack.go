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
	if len(b) == 0 {
		return nil, errPack
	}
	var n int
	switch c := b[0]; {
	case c >= 0x90 && c <= 0x9f:
		n, b = int(c&0x0f), b[1:]
	case c == 0xdc && len(b) >= 3:
		n, b = int(b[1])<<8|int(b[2]), b[3:]
	default:
		return nil, fmt.Errorf("%w: no array", errPack)
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

// unpackValue decodes one string or integer.
func unpackValue[B string | []byte](b B) (any, B, error) {
	if len(b) == 0 {
		return nil, b, errPack
	}
	c := b[0]
	b = b[1:]
	take := func(n int) (B, bool) {
		if len(b) < n {
			return b[:0], false
		}
		v := b[:n]
		b = b[n:]
		return v, true
	}
	str := func(n int) (any, B, error) {
		s, ok := take(n)
		if !ok {
			return nil, b, errPack
		}
		return string(s), b, nil
	}
	switch {
	case c <= 0x7f:
		return int64(c), b, nil
	case c >= 0xe0:
		return int64(int8(c)), b, nil
	case c >= 0xa0 && c <= 0xbf:
		return str(int(c & 0x1f))
	}
	size := 0
	switch c {
	case 0xd9, 0xcc, 0xd0:
		size = 1
	case 0xda, 0xcd, 0xd1:
		size = 2
	case 0xdb, 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3, 0xcb:
		size = 8
	default:
		return nil, b, fmt.Errorf("%w: type 0x%02x", errPack, c)
	}
	raw, ok := take(size)
	if !ok {
		return nil, b, errPack
	}
	var u uint64
	for i := range len(raw) {
		u = u<<8 | uint64(raw[i])
	}
	switch c {
	case 0xd9, 0xda, 0xdb:
		return str(int(u))
	case 0xcc, 0xcd, 0xce:
		return int64(u), b, nil
	case 0xcf:
		if u > math.MaxInt64 {
			return nil, b, errPack
		}
		return int64(u), b, nil
	case 0xd0:
		return int64(int8(u)), b, nil
	case 0xd1:
		return int64(int16(u)), b, nil
	case 0xd2:
		return int64(int32(u)), b, nil
	case 0xd3:
		return int64(u), b, nil
	default: // 0xcb: a float64 holding an integer
		f := math.Float64frombits(u)
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, b, fmt.Errorf("%w: non-integer number", errPack)
		}
		return int64(f), b, nil
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
