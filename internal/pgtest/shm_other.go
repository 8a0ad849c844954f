//go:build !(linux && (amd64 || arm || arm64 || loong64 || mips64 || mips64le || riscv64))

package pgtest

// shmSupported tells whether shmKeyOf and removeShm work here.
const shmSupported = false

// shmKeyOf is not available here: it reports no segment.
func shmKeyOf(id int) (int, bool) { return 0, false }

// removeShm does nothing here: the segment a killed postmaster leaves stays
// until removed by hand (ipcrm).
func removeShm(key, id int) {}
