// Package jobfile reads job spec files (YAML or JSON) and the job flags of
// `chronos jobs add` and `chronos jobs edit` into an agent.JobSpec or an
// agent.JobPatch: one place for the names of a job's settings on the
// command line and in files.
package jobfile
