package controller

import (
	"context"
	"fmt"
	"time"
)

// Reconciliation is a list of named tasks, run in order (the shape of tidb-operator v2's task
// runner): each returns a Result saying whether the next may run. The first task that does not
// complete stops the chain, and its name, reason and message become the status conditions'
// contract: Wait sets Progressing, Fail sets Degraded, so the status always says which task
// blocked and why.

// Outcome of a task.
type Outcome int

const (
	// Complete: the task's objects are as desired; the next task runs.
	Complete Outcome = iota
	// Wait: the task acted or is waiting for something that takes time; the chain stops and is
	// retried soon (Progressing).
	Wait
	// Fail: the task cannot go on without a person (a refused spec, an object the API server
	// rejects); the chain stops (Degraded).
	Fail
)

func (o Outcome) String() string {
	switch o {
	case Complete:
		return "Complete"
	case Wait:
		return "Wait"
	case Fail:
		return "Fail"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result of a task.
type Result struct {
	Outcome Outcome
	// Reason is a CamelCase condition reason.
	Reason string
	// Message says what is wrong or awaited and what to do.
	Message string
	// RequeueAfter overrides the controller's requeue interval when set.
	RequeueAfter time.Duration
	// Err is an error to hand to controller-runtime (retried with backoff).
	Err error
}

// Done is a completed task.
func Done() Result { return Result{Outcome: Complete} }

// Waiting is a task that waits for something.
func Waiting(reason, format string, args ...any) Result {
	return Result{Outcome: Wait, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Failed is a task that needs a person.
func Failed(reason, format string, args ...any) Result {
	return Result{Outcome: Fail, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Errored is a task that hit an error; it fails with the error's text and is retried.
func Errored(reason string, err error) Result {
	return Result{Outcome: Fail, Reason: reason, Message: err.Error(), Err: err}
}

// Task is one named step over a state S.
type Task[S any] struct {
	Name string
	Run  func(ctx context.Context, s S) Result
}

// Report is what a run of tasks did.
type Report struct {
	// Ran lists the tasks that ran, in order.
	Ran []string
	// Blocked is the task that stopped the chain ("" when all completed) and Result its result.
	Blocked string
	Result  Result
}

// Complete says whether every task completed.
func (r Report) Complete() bool { return r.Blocked == "" }

// RunTasks runs tasks in order until one does not complete.
func RunTasks[S any](ctx context.Context, s S, tasks []Task[S]) Report {
	var rep Report
	for _, t := range tasks {
		if err := ctx.Err(); err != nil {
			rep.Blocked, rep.Result = t.Name, Errored("Interrupted", err)
			return rep
		}
		rep.Ran = append(rep.Ran, t.Name)
		res := t.Run(ctx, s)
		if res.Outcome != Complete {
			rep.Blocked, rep.Result = t.Name, res
			return rep
		}
	}
	return rep
}
