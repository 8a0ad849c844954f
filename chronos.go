// Package chronos is the root of the Chronos module. It carries the OpenAPI
// description of every HTTP endpoint so that any package (handler tests in
// particular) can load it; go:embed cannot reach parent directories.
package chronos

import _ "embed"

// OpenAPI is the content of openapi.yaml: the OpenAPI 3.0.3 description of
// every HTTP endpoint of NAS and the agent, which contract tests check real
// handler traffic against.
//
//go:embed openapi.yaml
var OpenAPI []byte
