package taskboard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	taskboard "github.com/taskboard-contract/taskboard/go"
	"github.com/taskboard-contract/taskboard/go/memboard"
)

type fixedClock struct{}

func (fixedClock) Now() time.Time { return time.Unix(1767225600, 0).UTC() }

func board(bug string, tasks ...taskboard.Task) *memboard.Board {
	b := memboard.New(tasks, fixedClock{})
	b.Bug = bug
	return b
}

var eight = []taskboard.AgentID{"a", "a", "b", "c", "d", "e", "f", "g"}

// TestConcurrentClaimOneWinner: an atomic claim has exactly one winner among agents whose
// names repeat.
func TestConcurrentClaimOneWinner(t *testing.T) {
	wins, err := taskboard.ConcurrentClaim(context.Background(), board("", open("t1")), "t1", eight, time.Second)
	if err != nil || wins != 1 {
		t.Fatalf("ConcurrentClaim = %d, %v; want 1, nil", wins, err)
	}
}

// TestConcurrentClaimCountsEveryWinner: a claim that checks and then writes lets several
// agents win, and the criterion counts them.
func TestConcurrentClaimCountsEveryWinner(t *testing.T) {
	wins, err := taskboard.ConcurrentClaim(context.Background(), board(memboard.ClaimNotAtomic, open("t1")), "t1", eight, 0)
	if err != nil || wins < 2 {
		t.Fatalf("ConcurrentClaim = %d, %v; want several winners", wins, err)
	}
}

// TestConcurrentClaimInconclusiveWhenBlocked: losers that never reached the contention make
// the run inconclusive, not a pass.
func TestConcurrentClaimInconclusiveWhenBlocked(t *testing.T) {
	_, err := taskboard.ConcurrentClaim(context.Background(), board("", open("dep"), open("t1", "dep")), "t1", eight, 0)
	var criterion *taskboard.CriterionError
	if !errors.As(err, &criterion) || criterion.Verdict != taskboard.VerdictInconclusive || !errors.Is(err, taskboard.ErrBlocked) {
		t.Fatalf("err = %v; want an inconclusive CriterionError carrying ErrBlocked", err)
	}
}

type brokenBoard struct{ *memboard.Board }

var errConnection = errors.New("connection refused")

func (brokenBoard) Claim(context.Context, taskboard.TaskID, taskboard.AgentID, taskboard.ClaimRequest) (taskboard.Task, error) {
	return taskboard.Task{}, errConnection
}

func (brokenBoard) Complete(context.Context, taskboard.TaskID, string) error { return errConnection }

// TestConcurrentClaimFaultIsNeverALoser: a storage error is an infrastructure fault, even
// though nobody won.
func TestConcurrentClaimFaultIsNeverALoser(t *testing.T) {
	wins, err := taskboard.ConcurrentClaim(context.Background(), brokenBoard{board("", open("t1"))}, "t1", eight, 0)
	var criterion *taskboard.CriterionError
	if wins != 0 || !errors.As(err, &criterion) || criterion.Verdict != taskboard.VerdictFault || len(criterion.Errs) != len(eight) {
		t.Fatalf("ConcurrentClaim = %d, %v; want an infrastructure fault with every error", wins, err)
	}
}

// TestCriteriaRejectBadArguments: no agents, an empty agent, no workers or a negative ttl is
// ErrBadCriterion.
func TestCriteriaRejectBadArguments(t *testing.T) {
	ctx, b := context.Background(), board("", open("t1"))
	for _, err := range []error{
		func() error { _, err := taskboard.ConcurrentClaim(ctx, b, "t1", nil, 0); return err }(),
		func() error {
			_, err := taskboard.ConcurrentClaim(ctx, b, "t1", []taskboard.AgentID{""}, 0)
			return err
		}(),
		func() error { _, err := taskboard.ConcurrentClaim(ctx, b, "t1", eight, -1); return err }(),
		func() error { _, err := taskboard.DuplicateTokenSubmit(ctx, b, "t1", 0, 0); return err }(),
	} {
		if !errors.Is(err, taskboard.ErrBadCriterion) {
			t.Errorf("err = %v; want ErrBadCriterion", err)
		}
	}
}

// TestDuplicateTokenSubmitOneSuccess: one token submitted by eight workers at once
// completes the task once; the task is left done.
func TestDuplicateTokenSubmitOneSuccess(t *testing.T) {
	b := board("", open("t1"))
	wins, err := taskboard.DuplicateTokenSubmit(context.Background(), b, "t1", 8, time.Second)
	if err != nil || wins != 1 {
		t.Fatalf("DuplicateTokenSubmit = %d, %v; want 1, nil", wins, err)
	}
	tasks, _ := b.List(context.Background())
	if tasks[0].State != taskboard.StateDone {
		t.Fatalf("the task is %s, want done", tasks[0].State)
	}
}

// TestDuplicateTokenSubmitSetUpClaimFailure: a set-up claim that fails is reported with its
// error and no submitter runs.
func TestDuplicateTokenSubmitSetUpClaimFailure(t *testing.T) {
	wins, err := taskboard.DuplicateTokenSubmit(context.Background(), board("", done("t1")), "t1", 4, 0)
	var criterion *taskboard.CriterionError
	if wins != 0 || !errors.As(err, &criterion) || criterion.Verdict != taskboard.VerdictInconclusive || !errors.Is(err, taskboard.ErrTerminal) {
		t.Fatalf("DuplicateTokenSubmit = %d, %v; want an inconclusive ErrTerminal", wins, err)
	}
	_, err = taskboard.DuplicateTokenSubmit(context.Background(), brokenBoard{board("", open("t1"))}, "t1", 4, 0)
	if !errors.As(err, &criterion) || criterion.Verdict != taskboard.VerdictFault {
		t.Fatalf("err = %v; want an infrastructure fault", err)
	}
}

type hangingBoard struct{ *memboard.Board }

func (hangingBoard) Claim(ctx context.Context, _ taskboard.TaskID, _ taskboard.AgentID, _ taskboard.ClaimRequest) (taskboard.Task, error) {
	select {} // a claim that never returns, whatever the context says
}

// TestConcurrentClaimStopsAtTheContextsEnd: a claim still running when ctx ends is an
// infrastructure fault, and the criterion returns.
func TestConcurrentClaimStopsAtTheContextsEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := taskboard.ConcurrentClaim(ctx, hangingBoard{board("", open("t1"))}, "t1", eight[:2], 0)
	var criterion *taskboard.CriterionError
	if !errors.As(err, &criterion) || criterion.Verdict != taskboard.VerdictFault || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want an infrastructure fault carrying context.Canceled", err)
	}
}
