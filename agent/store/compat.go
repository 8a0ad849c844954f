package store

import "github.com/chronoscron/chronos/agent/job"

// Temporary: the job model moved to package job.
type (
	Job         = job.Job
	Duration    = job.Duration
	Misfire     = job.Misfire
	Overlap     = job.Overlap
	Window      = job.Window
	OnInterrupt = job.OnInterrupt
	Repeat      = job.Repeat
	Retry       = job.Retry
	Claim       = job.Claim
	Pending     = job.Pending
	Owner       = job.Owner
	Decision    = job.Decision
	Workflow    = job.Workflow
	ReducerOn   = job.ReducerOn
	Reducer     = job.Reducer
	Fanout      = job.Fanout
)

const (
	MisfireRunOnce     = job.MisfireRunOnce
	MisfireSkip        = job.MisfireSkip
	MisfireRunAll      = job.MisfireRunAll
	OverlapSkip        = job.OverlapSkip
	OverlapQueueOne    = job.OverlapQueueOne
	OverlapAllow       = job.OverlapAllow
	OverlapReplace     = job.OverlapReplace
	WindowNone         = job.WindowNone
	WindowHourly       = job.WindowHourly
	WindowDaily        = job.WindowDaily
	WindowWeekly       = job.WindowWeekly
	InterruptRecord    = job.InterruptRecord
	InterruptRetry     = job.InterruptRetry
	StatusSucceeded    = job.StatusSucceeded
	StatusFailed       = job.StatusFailed
	StatusInterrupted  = job.StatusInterrupted
	PendingQueued      = job.PendingQueued
	PendingCatchUp     = job.PendingCatchUp
	PendingRetry       = job.PendingRetry
	JobKindPlain       = job.JobKindPlain
	JobKindWorkflow    = job.JobKindWorkflow
	JobKindFanout      = job.JobKindFanout
	DecisionSkip       = job.DecisionSkip
	DecisionFail       = job.DecisionFail
	DecisionRun        = job.DecisionRun
	ReduceOnSuccess    = job.ReduceOnSuccess
	ReduceAlways       = job.ReduceAlways
	ReduceOnAnySuccess = job.ReduceOnAnySuccess
	DefaultItemVar     = job.DefaultItemVar
)

var (
	ValidJobID       = job.ValidID
	ParseMisfire     = job.ParseMisfire
	ParseOverlap     = job.ParseOverlap
	ParseWindow      = job.ParseWindow
	ParseOnInterrupt = job.ParseOnInterrupt
	ParseJobKind     = job.ParseJobKind
	ParseDecision    = job.ParseDecision
	ParseReducerOn   = job.ParseReducerOn
	ParseOwner       = job.ParseOwner
)
