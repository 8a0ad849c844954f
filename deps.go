//go:build tools

// This file pins the module's dependencies that later code imports, so that
// `go mod tidy` keeps them while packages are being written.
package chronos

import (
	_ "github.com/MicahParks/keyfunc/v3"
	_ "github.com/getkin/kin-openapi/openapi3filter"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/google/uuid"
	_ "github.com/labstack/echo/v4"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/robfig/cron/v3"
	_ "github.com/spf13/cobra"
	_ "go.uber.org/goleak"
	_ "gopkg.in/yaml.v3"
)
