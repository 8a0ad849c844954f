// Package redise2e holds the end-to-end fault tests of the Redis relay:
// NAS and relay processes of the built binary share one real redis-server
// while the tests kill processes and restart Redis under them.
package redise2e
