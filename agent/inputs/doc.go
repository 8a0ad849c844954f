// Package inputs resolves a fanout's inputs_from address into its ordered
// list of items. Each scheme has its own resolver in its own file, with its
// own isolation: file:// reads a local file, http(s):// fetches through the
// agent's address policy (no private addresses unless allowed, no
// redirects, size and time capped), job:// reads the output of a job of the
// same agent, and sql:// queries a database the agent's configuration
// registers by name (never a DSN from a job).
package inputs
