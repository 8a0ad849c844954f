// Package memory is the embedded relay engine: every one-shot, lease, dead
// letter and control fact lives in the memory of one process, behind one
// mutex. It serves the single-process demo, development and tests; nothing
// survives a restart, so production uses relay/redis.
//
// Time is read from one injected clock (Options.Now), so tests can step it.
// Due times are kept in whole milliseconds rounded up, so a one-shot is never
// claimed before its fire_at.
package memory
