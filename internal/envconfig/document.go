package envconfig

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Document writes the struct cfg points to as YAML, keys in declaration
// order and nested as in the file, each leaf key commented with its
// variable; a duration is written as a Go duration string. The layout is the
// config file's, so the output is a starting point for one. Fields read from
// the environment only are left out.
func Document(cfg any, prefix string) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	sections := map[string]*yaml.Node{"": root}
	for _, f := range Fields(cfg, prefix) {
		if f.Key == "" {
			continue
		}
		parent, name := section(sections, f.Key)
		val, err := valueNode(f)
		if err != nil {
			return nil, err
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: name}
		if val.Kind == yaml.SequenceNode {
			// A flow sequence carries the comment itself.
			val.Style, val.LineComment = yaml.FlowStyle, f.Env
		} else {
			key.LineComment = f.Env
		}
		parent.Content = append(parent.Content, key, val)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("envconfig: %w", err)
	}
	return buf.Bytes(), nil
}

// section returns the mapping node that holds the dotted key, making the
// sections on its way, and the key's last part.
func section(sections map[string]*yaml.Node, key string) (*yaml.Node, string) {
	i := strings.LastIndex(key, ".")
	if i < 0 {
		return sections[""], key
	}
	path, leaf := key[:i], key[i+1:]
	if n, ok := sections[path]; ok {
		return n, leaf
	}
	parent, name := section(sections, path)
	n := &yaml.Node{Kind: yaml.MappingNode}
	parent.Content = append(parent.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, n)
	sections[path] = n
	return n, leaf
}

// valueNode encodes a field's value.
func valueNode(f Field) (*yaml.Node, error) {
	v := f.Value.Interface()
	switch x := v.(type) {
	case time.Duration:
		v = x.String()
	case *int:
		if x != nil {
			v = *x
		}
	case *float64:
		if x != nil {
			v = *x
		}
	}
	val := &yaml.Node{}
	if err := val.Encode(v); err != nil {
		return nil, fmt.Errorf("envconfig: %s: %w", f.Key, err)
	}
	return val, nil
}
