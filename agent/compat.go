package agent

import "github.com/chronoscron/chronos/agent/job"

// Temporary: the job model moved to package job.
type (
	Job         = job.Job
	Misfire     = job.Misfire
	Overlap     = job.Overlap
	Window      = job.Window
	OnInterrupt = job.OnInterrupt
	Retry       = job.Retry
	Repeat      = job.Repeat
	Claim       = job.Claim
	Pending     = job.Pending
	Workflow    = job.Workflow
	Fanout      = job.Fanout
	Reducer     = job.Reducer
)

const (
	MisfireRunOnce  = job.MisfireRunOnce
	MisfireSkip     = job.MisfireSkip
	MisfireRunAll   = job.MisfireRunAll
	OverlapSkip     = job.OverlapSkip
	OverlapQueueOne = job.OverlapQueueOne
	OverlapAllow    = job.OverlapAllow
	OverlapReplace  = job.OverlapReplace
	WindowNone      = job.WindowNone
	WindowHourly    = job.WindowHourly
	WindowDaily     = job.WindowDaily
	WindowWeekly    = job.WindowWeekly
	InterruptRecord = job.InterruptRecord
	InterruptRetry  = job.InterruptRetry
	JobKindPlain    = job.JobKindPlain
	JobKindWorkflow = job.JobKindWorkflow
	JobKindFanout   = job.JobKindFanout
)
