package cmdline

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Output is how a command prints its result: text for a person, or, with
// --json, one indented JSON document for a script. Every command that
// prints data takes --json through Output.
type Output struct {
	// JSON is set by --json.
	JSON bool
}

// Register adds --json to c, saying what it prints, and returns c.
func (o *Output) Register(c *cobra.Command, what string) *cobra.Command {
	c.Flags().BoolVar(&o.JSON, "json", false, "print "+what+" as JSON")
	return c
}

// Print writes v as JSON under --json, else calls text.
func (o *Output) Print(w io.Writer, v any, text func(io.Writer) error) error {
	if o.JSON {
		return WriteJSON(w, v)
	}
	return text(w)
}

// Aside is where a line for a person goes beside the result: w, or stderr
// under --json, so that stdout carries only the JSON document.
func (o *Output) Aside(cmd *cobra.Command) io.Writer {
	if o.JSON {
		return cmd.ErrOrStderr()
	}
	return cmd.OutOrStdout()
}

// WriteJSON writes v as indented JSON and a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// Textf returns a text printer for Print that writes one formatted line.
func Textf(format string, args ...any) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := fmt.Fprintf(w, format+"\n", args...)
		return err
	}
}
