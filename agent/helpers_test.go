package agent

import "github.com/chronoscron/chronos/agent/runner"

func payloadKind(k string) runner.Payload { return runner.Payload{Kind: k} }
