package chronos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/chronoscron/chronos"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/sidecar"
	"github.com/chronoscron/chronos/contract"
)

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(chronos.OpenAPI)
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	ctx := context.Background()
	if err := doc.Validate(ctx, openapi3.EnableExamplesValidation(), openapi3.EnableSchemaPatternValidation()); err != nil {
		t.Fatalf("openapi.yaml does not validate: %v", err)
	}
	return doc
}

func TestOpenAPIValidates(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
	if len(doc.Servers) < 3 {
		t.Errorf("servers: %d listed, want NAS public, NAS internal and agent", len(doc.Servers))
	}
}

// contractPaths reads the Path* constants of contract/paths.go, so that a
// path added there and forgotten here fails this test.
func contractPaths(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("contract", "paths.go"), nil, 0)
	if err != nil {
		t.Fatalf("parsing contract/paths.go: %v", err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Path") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not a string literal", name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatalf("%s: %v", name.Name, err)
				}
				out[name.Name] = v
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d Path constants in contract/paths.go; the parser is not finding them", len(out))
	}
	return out
}

func TestOpenAPIDocumentsEveryContractPath(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	for name, p := range contractPaths(t) {
		if doc.Paths.Value(p) == nil {
			t.Errorf("contract.%s = %q is not a path of openapi.yaml", name, p)
		}
	}
}

func TestOpenAPIOperations(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	errorSchema := doc.Components.Schemas["Error"]
	public := map[string]bool{"/.well-known/jwks.json": true, "/healthz": true, "/readyz": true, "/metrics": true,
		"/": true, "/ui": true, "/ui/{asset}": true, "/api/operator/session": true,
		// The agent's local API: the dashboard, its assets and the login.
		"/assets/{name}": true, "/api/session": true, "/api/login": true, "/api/logout": true}
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" || op.Summary == "" {
				t.Errorf("%s: operationId and summary are required", where)
			}
			if prev, dup := ids[op.OperationID]; dup {
				t.Errorf("%s: operationId %q also used by %s", where, op.OperationID, prev)
			}
			ids[op.OperationID] = where
			if op.Security == nil {
				t.Errorf("%s: security must be set on every operation (security: [] when public)", where)
			} else if public[path] != (len(*op.Security) == 0) {
				t.Errorf("%s: security %v; public routes (and only they) have security: []", where, *op.Security)
			}
			if rb := op.RequestBody; rb != nil {
				mt := rb.Value.Content.Get("application/json")
				switch {
				case mt == nil:
					t.Errorf("%s: request body is not application/json", where)
				case mt.Example == nil && len(mt.Examples) == 0:
					t.Errorf("%s: request body has no example", where)
				case mt.Schema.Value.AdditionalProperties.Has == nil || *mt.Schema.Value.AdditionalProperties.Has:
					t.Errorf("%s: request body schema must set additionalProperties: false", where)
				case len(mt.Schema.Value.Required) == 0 && len(mt.Schema.Value.AnyOf) == 0:
					t.Errorf("%s: request body schema has no required list", where)
				}
			}
			for code, resp := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s: response %q: use explicit statuses", where, code)
					continue
				}
				if len(resp.Value.Content) == 0 {
					t.Errorf("%s %d: response has no body", where, status)
					continue
				}
				for ct, mt := range resp.Value.Content {
					if mt.Example == nil && len(mt.Examples) == 0 {
						t.Errorf("%s %d %s: no example", where, status, ct)
					}
				}
				if status >= 400 && path != "/readyz" && path != "/healthz" {
					mt := resp.Value.Content.Get("application/json")
					if mt == nil || mt.Schema.Value != errorSchema.Value {
						t.Errorf("%s %d: error responses must use the Error schema", where, status)
					}
				}
				if status == http.StatusTooManyRequests || (status == http.StatusServiceUnavailable && path != "/readyz" && path != "/healthz") {
					h := resp.Value.Headers["Retry-After"]
					if h == nil || !h.Value.Required {
						t.Errorf("%s %d: Retry-After must be a required header", where, status)
					}
				}
			}
		}
	}
}

// goTypes maps schemas of openapi.yaml to the contract types that carry them
// on the wire. subset marks schemas that describe one variant of a wider
// type (their properties are a subset of its fields).
var goTypes = map[string]struct {
	typ    reflect.Type
	subset bool
}{
	"Error":                  {reflect.TypeFor[contract.Error](), false},
	"ProvisionRequest":       {reflect.TypeFor[contract.ProvisionRequest](), false},
	"ProvisionResponse":      {reflect.TypeFor[contract.ProvisionResponse](), false},
	"CancelRequest":          {reflect.TypeFor[contract.CancelRequest](), false},
	"OKResponse":             {reflect.TypeFor[contract.OKResponse](), false},
	"ArmedJob":               {reflect.TypeFor[contract.ArmedJob](), false},
	"FailedFire":             {reflect.TypeFor[contract.FailedFire](), false},
	"ListResponse":           {reflect.TypeFor[contract.ListResponse](), false},
	"FailedFiresAckRequest":  {reflect.TypeFor[contract.FailedFiresAckRequest](), false},
	"FailedFiresAckResponse": {reflect.TypeFor[contract.FailedFiresAckResponse](), false},
	"DesiredArm":             {reflect.TypeFor[contract.DesiredArm](), false},
	"PutArmedRequest":        {reflect.TypeFor[contract.PutArmedRequest](), false},
	"PutArmedResponse":       {reflect.TypeFor[contract.PutArmedResponse](), false},
	"RelayRequest":           {reflect.TypeFor[contract.RelayRequest](), false},
	"RelayResponse":          {reflect.TypeFor[contract.RelayResponse](), false},
	"FireRequest":            {reflect.TypeFor[contract.FireRequest](), false},
	"FireAccepted":           {reflect.TypeFor[contract.FireResponse](), false},
	"FireSettled":            {reflect.TypeFor[contract.FireResponse](), true},
	"JWKS":                   {reflect.TypeFor[contract.JWKS](), false},
	"OKPKey":                 {reflect.TypeFor[contract.JWK](), true},
	"ECKey":                  {reflect.TypeFor[contract.JWK](), true},
	"RSAKey":                 {reflect.TypeFor[contract.JWK](), true},
	"HealthResponse":         {reflect.TypeFor[contract.HealthResponse](), false},
	"InstanceStateResponse":  {reflect.TypeFor[contract.InstanceStateResponse](), false},
	"AgentRekeyResponse":     {reflect.TypeFor[contract.AgentRekeyResponse](), false},
	"CancelAllResponse":      {reflect.TypeFor[contract.CancelAllResponse](), false},
	"AgentStateResponse":     {reflect.TypeFor[contract.AgentStateResponse](), false},
	"DeadLetter":             {reflect.TypeFor[contract.DeadLetter](), false},
	"DLQListResponse":        {reflect.TypeFor[contract.DLQListResponse](), false},
	"DLQReplayRequest":       {reflect.TypeFor[contract.DLQReplayRequest](), false},
	"DLQReplayResponse":      {reflect.TypeFor[contract.DLQReplayResponse](), false},
	"DLQReplayEntry":         {reflect.TypeFor[contract.DLQReplayEntry](), false},
	"DLQDropped":             {reflect.TypeFor[contract.DLQDropped](), false},
	"UnarmedJob":             {reflect.TypeFor[contract.UnarmedJob](), false},
	"UnarmedResponse":        {reflect.TypeFor[contract.UnarmedResponse](), false},
	"InstanceStatus":         {reflect.TypeFor[contract.InstanceStatus](), false},
	"ReconcileRequest":       {reflect.TypeFor[contract.ReconcileRequest](), false},
	"ReconcileResponse":      {reflect.TypeFor[contract.ReconcileResponse](), false},

	// The operator dashboard's routes.
	"OperatorOverview":        {reflect.TypeFor[contract.OperatorOverview](), false},
	"AgentFlowState":          {reflect.TypeFor[contract.AgentFlowState](), false},
	"OperatorSessionRequest":  {reflect.TypeFor[contract.OperatorSessionRequest](), false},
	"OperatorSessionResponse": {reflect.TypeFor[contract.OperatorSessionResponse](), false},

	// The dashboard's explorer routes.
	"OperatorHistory":   {reflect.TypeFor[contract.OperatorHistory](), false},
	"HistoryPoint":      {reflect.TypeFor[contract.HistoryPoint](), false},
	"OperatorAgents":    {reflect.TypeFor[contract.OperatorAgents](), false},
	"AgentSummary":      {reflect.TypeFor[contract.AgentSummary](), false},
	"DeliveryAttempt":   {reflect.TypeFor[contract.DeliveryAttempt](), false},
	"OperatorAgent":     {reflect.TypeFor[contract.OperatorAgent](), false},
	"AgentArmedPage":    {reflect.TypeFor[contract.AgentArmedPage](), false},
	"ArmedFire":         {reflect.TypeFor[contract.ArmedFire](), false},
	"OperatorProcesses": {reflect.TypeFor[contract.OperatorProcesses](), false},
	"DispatchProcess":   {reflect.TypeFor[contract.DispatchProcess](), false},
}

// localTypes maps the local API's schemas to the types of package localapi
// (which embed the runtime's views, so their examples are decoded with
// encoding/json, unknown fields refused).
var localTypes = map[string]reflect.Type{
	"LocalSessionInfo":   reflect.TypeFor[localapi.SessionInfo](),
	"LocalLoginRequest":  reflect.TypeFor[localapi.LoginRequest](),
	"LocalRemoved":       reflect.TypeFor[localapi.Removed](),
	"LocalJobSpec":       reflect.TypeFor[localapi.JobSpec](),
	"LocalJobPatch":      reflect.TypeFor[localapi.JobPatch](),
	"LocalJob":           reflect.TypeFor[localapi.JobInfo](),
	"LocalJobList":       reflect.TypeFor[localapi.JobList](),
	"LocalPauseRequest":  reflect.TypeFor[localapi.PauseRequest](),
	"LocalRunRequest":    reflect.TypeFor[localapi.RunRequest](),
	"LocalRunStarted":    reflect.TypeFor[localapi.RunStarted](),
	"LocalRun":           reflect.TypeFor[localapi.RunInfo](),
	"LocalRunList":       reflect.TypeFor[localapi.RunList](),
	"LocalRunDetail":     reflect.TypeFor[localapi.RunDetail](),
	"LocalCancelRequest": reflect.TypeFor[localapi.CancelRequest](),
	"LocalCancelAnswer":  reflect.TypeFor[localapi.CancelAnswer](),
	"LocalStatus":        reflect.TypeFor[sidecar.Report](),
	"LocalRunChildren":   reflect.TypeFor[localapi.RunChildren](),
	"LocalChainList":     reflect.TypeFor[localapi.ChainList](),
	"LocalChainStory":    reflect.TypeFor[localapi.ChainStory](),
	"LocalBreakerList":   reflect.TypeFor[localapi.BreakerList](),
	"LocalBreaker":       reflect.TypeFor[chain.Breaker](),
}

// checkLocalExample decodes a local API example into t, unknown fields
// refused.
func checkLocalExample(t *testing.T, where string, example any, typ reflect.Type) {
	t.Helper()
	raw, err := json.Marshal(example)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(reflect.New(typ).Interface()); err != nil {
		t.Errorf("%s: the example %s does not decode into %s: %v", where, raw, typ, err)
	}
}

// wireFields returns the JSON names of t's fields.
func wireFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// The schemas name exactly the fields of the Go types.
func TestOpenAPISchemasMatchContractTypes(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	for name, gt := range goTypes {
		ref := doc.Components.Schemas[name]
		if ref == nil {
			t.Errorf("schema %s is missing", name)
			continue
		}
		var props []string
		for p := range ref.Value.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		fields := wireFields(gt.typ)
		if gt.subset {
			for _, p := range props {
				if !slices.Contains(fields, p) {
					t.Errorf("schema %s: property %q is not a field of %s (%v)", name, p, gt.typ, fields)
				}
			}
		} else if !slices.Equal(props, fields) {
			t.Errorf("schema %s has properties %v; %s has fields %v", name, props, gt.typ, fields)
		}
		for _, r := range ref.Value.Required {
			if !slices.Contains(fields, r) {
				t.Errorf("schema %s requires %q, which %s does not have", name, r, gt.typ)
			}
		}
	}
}

// Every JSON example of a request or response body decodes strictly into the
// contract type of its schema, and every request example passes the
// description's own validation.
func TestOpenAPIExamplesDecodeStrictly(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	check := func(where string, mt *openapi3.MediaType) {
		if mt == nil || mt.Example == nil || mt.Schema == nil {
			return
		}
		name := strings.TrimPrefix(mt.Schema.Ref, "#/components/schemas/")
		if lt, ok := localTypes[name]; ok {
			checkLocalExample(t, where, mt.Example, lt)
			return
		}
		gt, ok := goTypes[name]
		if !ok {
			t.Errorf("%s: body schema %q has no contract type", where, mt.Schema.Ref)
			return
		}
		raw, err := json.Marshal(mt.Example)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if e := contract.DecodeBytes(raw, reflect.New(gt.typ).Interface()); e != nil {
			t.Errorf("%s: the example %s does not decode into %s: %v", where, raw, gt.typ, e)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody != nil {
				check(method+" "+path+" request", op.RequestBody.Value.Content.Get("application/json"))
			}
			for code, resp := range op.Responses.Map() {
				check(method+" "+path+" "+code, resp.Value.Content.Get("application/json"))
			}
		}
	}
	for name, resp := range doc.Components.Responses {
		check("response "+name, resp.Value.Content.Get("application/json"))
	}
}
