// Package memboard is the smallest correct board: its tasks in memory behind one mutex. It
// is the board of the examples and of the module's own tests, and the model of a host
// tested with protocoltest (memboard_test.go).
//
// Bug plants a realistic bug, so a test can watch the checker catch it.
package memboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	taskboard "github.com/taskboard-contract/taskboard/go"
)

// The bugs Board.Bug can plant.
const (
	// ReleaseIgnoresToken: a release succeeds with any token while the task is claimed.
	ReleaseIgnoresToken = "release-ignores-token"
	// ClaimNotAtomic: a claim checks, lets other goroutines run, then writes.
	ClaimNotAtomic = "claim-not-atomic"
)

// Clock is the time the board reads (protocol.Clock satisfies it).
type Clock interface{ Now() time.Time }

// Board keeps tasks in memory. It is a taskboard.RenewingBoard and a taskboard.FailingBoard.
type Board struct {
	// Bug, when set to one of the bug constants, plants that bug.
	Bug    string
	clock  Clock
	mu     sync.Mutex
	tasks  []taskboard.Task
	fences map[taskboard.TaskID]taskboard.Fence
}

// New is a board holding a copy of tasks, reading time from clock.
func New(tasks []taskboard.Task, clock Clock) *Board {
	return &Board{clock: clock, tasks: append([]taskboard.Task(nil), tasks...), fences: map[taskboard.TaskID]taskboard.Fence{}}
}

func (b *Board) find(id taskboard.TaskID) *taskboard.Task {
	for i := range b.tasks {
		if b.tasks[i].ID == id {
			return &b.tasks[i]
		}
	}
	return nil
}

func live(t *taskboard.Task, now time.Time) bool {
	return t.State == taskboard.StateClaimed && (t.Lease.Until.IsZero() || now.Before(t.Lease.Until))
}

func until(now time.Time, ttl time.Duration) time.Time {
	if ttl == 0 {
		return time.Time{}
	}
	return now.Add(ttl)
}

func token() string {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		panic(err)
	}
	return hex.EncodeToString(raw)
}

// List returns a copy of every task.
func (b *Board) List(ctx context.Context) ([]taskboard.Task, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]taskboard.Task(nil), b.tasks...), nil
}

// Claim grants a new lease on the task, with the refusals of SPEC 3.1 in their order.
func (b *Board) Claim(ctx context.Context, id taskboard.TaskID, agent taskboard.AgentID, req taskboard.ClaimRequest) (taskboard.Task, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	t := b.find(id)
	switch {
	case t == nil:
		return taskboard.Task{}, taskboard.ErrNotFound
	case t.State.Terminal():
		return taskboard.Task{}, taskboard.ErrTerminal
	}
	for _, dep := range t.Deps {
		if d := b.find(dep); d == nil || d.State != taskboard.StateDone {
			return taskboard.Task{}, taskboard.ErrBlocked
		}
	}
	if live(t, now) {
		return taskboard.Task{}, taskboard.ErrTaken
	}
	if agent == "" {
		return taskboard.Task{}, taskboard.ErrInvalid
	}
	if b.Bug == ClaimNotAtomic {
		b.mu.Unlock()
		time.Sleep(time.Millisecond)
		b.mu.Lock()
	}
	fence := b.fences[id] + 1
	b.fences[id] = fence
	t.State, t.Owner, t.Seq = taskboard.StateClaimed, agent, t.Seq+1
	t.Lease = taskboard.Lease{Token: token(), Fence: fence, Until: until(now, req.TTL)}
	return *t, nil
}

// held is the task token holds, or why it does not (SPEC 3.2 to 3.6).
func (b *Board) held(id taskboard.TaskID, tok string, checkToken bool) (*taskboard.Task, error) {
	t := b.find(id)
	if t == nil {
		return nil, taskboard.ErrNotFound
	}
	if t.State != taskboard.StateClaimed || (checkToken && t.Lease.Token != tok) {
		return nil, taskboard.ErrLeaseLost
	}
	return t, nil
}

func (b *Board) finish(id taskboard.TaskID, tok string, state taskboard.State, checkToken bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.held(id, tok, checkToken)
	if err != nil {
		return err
	}
	t.State, t.Owner, t.Lease, t.Seq = state, "", taskboard.Lease{}, t.Seq+1
	return nil
}

// Release gives the task back (SPEC 3.2).
func (b *Board) Release(ctx context.Context, id taskboard.TaskID, tok string) error {
	return b.finish(id, tok, taskboard.StateOpen, b.Bug != ReleaseIgnoresToken)
}

// Complete marks the task done (SPEC 3.3).
func (b *Board) Complete(ctx context.Context, id taskboard.TaskID, tok string) error {
	return b.finish(id, tok, taskboard.StateDone, true)
}

// Fail marks the task failed, to be claimed again (SPEC 3.6).
func (b *Board) Fail(ctx context.Context, id taskboard.TaskID, tok string) error {
	return b.finish(id, tok, taskboard.StateFailed, true)
}

// Renew moves a live lease's end to ttl after now (SPEC 3.5).
func (b *Board) Renew(ctx context.Context, id taskboard.TaskID, tok string, req taskboard.ClaimRequest) (taskboard.Task, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.held(id, tok, true)
	if err != nil {
		return taskboard.Task{}, err
	}
	now := b.clock.Now()
	if !live(t, now) {
		return taskboard.Task{}, taskboard.ErrLeaseLost
	}
	t.Lease.Until, t.Seq = until(now, req.TTL), t.Seq+1
	return *t, nil
}
