// Package redise2e holds the end-to-end fault tests of the Redis relay:
// NAS and relay processes of the built binary share one real redis-server
// while the tests kill processes and restart Redis under them.
//
// TestSoakSteadyRate runs NAS at INFO with a relay process and agents'
// interval jobs at a steady rate, checking exactly-once delivery, NAS's log
// bytes per fire, and that the processes' RSS and Redis's memory level off.
// By default it runs 45 seconds at 150 fires a second; CHRONOS_SOAK=1
// runs it for 20 minutes at 300 a second (and lengthens the fault tests).
package redise2e
