// Package jobfile reads job spec files (YAML or JSON) and the job kind
// flags of `chronos jobs add` into an agent.JobSpec: one place for the
// names of the workflow and fanout settings on the command line and in
// files.
package jobfile
