package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/store"
)

// flagValues are the values shell completion offers for the flags that
// take one of a few words, wherever a command has such a flag.
var flagValues = map[string][]string{
	"misfire":        {"run_once", "skip", "run_all"},
	"overlap":        {"skip", "queue_one", "allow", "replace"},
	"window":         {"none", "hourly", "daily", "weekly"},
	"on-interrupt":   {"record", "retry"},
	"kind":           {"plain", "workflow", "fanout"},
	"on-missing":     {"skip", "fail", "run"},
	"on-dep-fail":    {"skip", "fail", "run"},
	"reducer-run-on": {"success", "always", "any_success"},
	"http-method":    {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"},
	"tz":             {"UTC", "Local", "America/New_York", "America/Los_Angeles", "Europe/London", "Europe/Paris", "Europe/Berlin", "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney"},
}

// jobIDFlags are flags that name a job of the home.
var jobIDFlags = []string{"job", "depends-on"}

// addCompletions makes shell completion offer, under c and every command
// below it: the values of the flags in flagValues, the job ids of the home
// (--home) for the flags in jobIDFlags, and for the jobs commands that take
// a job id as their argument.
func addCompletions(c *cobra.Command, jobs *jobsCLI) {
	for name, values := range flagValues {
		if c.Flags().Lookup(name) != nil {
			_ = c.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	if jobs != nil {
		for _, name := range jobIDFlags {
			if c.Flags().Lookup(name) != nil {
				_ = c.RegisterFlagCompletionFunc(name, jobs.completeJobIDs)
			}
		}
		if c.HasParent() && c.Parent().Name() == "jobs" && firstArg(c.Use) == "ID" && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return jobs.completeJobIDs(cmd, args, toComplete)
			}
		}
	}
	for _, sub := range c.Commands() {
		addCompletions(sub, jobs)
	}
}

// firstArg is the word after the command's name in its usage line.
func firstArg(use string) string {
	if f := strings.Fields(use); len(f) > 1 {
		return f[1]
	}
	return ""
}

// completeJobIDs offers the ids of the home's jobs that start with
// toComplete, each with its schedule as the description. It only reads the
// home's job file: completing creates, locks and changes nothing.
func (c *jobsCLI) completeJobIDs(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	t, err := target(c.home)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	f, err := os.Open(filepath.Join(t.Home, store.JobsFile))
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer f.Close()
	var file struct {
		Jobs []struct {
			ID       string `json:"id"`
			Schedule string `json:"schedule"`
		} `json:"jobs"`
	}
	b, err := store.ReadLimited(f, store.JobsFile, t.Config.JobsFileLimit())
	if err != nil || json.Unmarshal(b, &file) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	var out []string
	for _, j := range file.Jobs {
		if strings.HasPrefix(j.ID, toComplete) {
			out = append(out, j.ID+"\t"+strings.Join(strings.Fields(j.Schedule), " "))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
