package nas_test

import (
	"fmt"

	"github.com/chronoscron/chronos/nas"
)

// An agents file stores the SHA-256 of each agent's token, never the token.
func ExampleTokenSHA256() {
	fmt.Println(nas.TokenSHA256("dev-agent-token")[:16])
	// Output: 461ebf6d4b054299
}

// NAS POSTs a fire to the callback base URL with /api/cron/fire appended; a
// callback that already names the fire route is used as it is.
func ExampleFireURL() {
	fmt.Println(nas.FireURL("https://agent-xyz.example.com"))
	fmt.Println(nas.FireURL("https://agent-xyz.example.com/api/cron/fire"))
	// Output:
	// https://agent-xyz.example.com/api/cron/fire
	// https://agent-xyz.example.com/api/cron/fire
}
