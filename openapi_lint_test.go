package chronos_test

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/chronoscron/chronos"
)

// TestOpenAPINullableHasType: every schema that says nullable also says its
// type beside it (OpenAPI 3.0 reads nullable only with a type, and linters
// refuse it alone, as beside a bare allOf).
func TestOpenAPINullableHasType(t *testing.T) {
	t.Parallel()
	var root yaml.Node
	if err := yaml.Unmarshal(chronos.OpenAPI, &root); err != nil {
		t.Fatal(err)
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			nullable, typed := false, false
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i].Value, n.Content[i+1]
				switch k {
				case "nullable":
					nullable = v.Value == "true"
				case "type":
					typed = true
				}
				walk(v, path+"/"+k)
			}
			if nullable && !typed {
				t.Errorf("openapi.yaml %s (line %d): nullable without a type", path, n.Line)
			}
		}
	}
	walk(&root, "")
}

// TestOpenAPIPathsHaveNoTrailingSlash: no path but the root ends with a
// slash (linters refuse "/ui/" beside "/ui/{asset}").
func TestOpenAPIPathsHaveNoTrailingSlash(t *testing.T) {
	t.Parallel()
	for path := range loadSpec(t).Paths.Map() {
		if path != "/" && strings.HasSuffix(path, "/") {
			t.Errorf("openapi.yaml path %q ends with a slash", path)
		}
	}
}
