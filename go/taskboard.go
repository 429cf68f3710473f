// Package taskboard is the storage-neutral board contract that the Python checker ports
// (SPEC 1 to 5): the types, the sentinel errors, the Board interfaces, the snapshot
// invariants (Check) and the two concurrency criteria (ConcurrentClaim and
// DuplicateTokenSubmit).
//
// Import it as
//
//	import taskboard "github.com/taskboard-contract/taskboard/go"
//
// Its subpackages serve a Board to the checker over the board protocol (protocol) and run
// the checker from go test (protocoltest).
package taskboard

import (
	"context"
	"errors"
	"time"
)

// The sentinel errors a board returns to reject an operation (SPEC 3).
var (
	ErrNotFound  = errors.New("taskboard: task not found")
	ErrTaken     = errors.New("taskboard: task is held by a live lease")
	ErrBlocked   = errors.New("taskboard: a dependency is not done")
	ErrTerminal  = errors.New("taskboard: task is done")
	ErrLeaseLost = errors.New("taskboard: the token no longer holds the task")
	// ErrInvalid rejects a claim by an empty agent (Python's ValueError).
	ErrInvalid = errors.New("taskboard: invalid argument")
)

// TaskID names a task; AgentID names an agent, and may repeat.
type (
	TaskID  string
	AgentID string
	Fence   uint64
	State   string
)

// The four states of a task.
const (
	StateOpen    State = "open"
	StateClaimed State = "claimed"
	StateDone    State = "done"
	// StateFailed is not terminal: failed work is usually redone, so the task can be claimed
	// again (SPEC 3.6).
	StateFailed State = "failed"
)

// Terminal reports whether a task in this state can never be claimed again: true for
// StateDone only. A failed task must stay claimable, or one failure would pin it for good.
func (s State) Terminal() bool { return s == StateDone }

// Lease is the proof of one claim, minted by the board. A zero Until never expires.
type Lease struct {
	Token string
	Fence Fence
	Until time.Time
}

// Task is one subtask as the board stores it.
type Task struct {
	ID    TaskID
	Title string
	Deps  []TaskID
	State State
	Owner AgentID
	Lease Lease
	Seq   uint64
}

// ClaimRequest says how long a lease should last; zero never expires.
type ClaimRequest struct {
	TTL time.Duration
}

// Board is the contract every board keeps.
type Board interface {
	List(ctx context.Context) ([]Task, error)
	Claim(ctx context.Context, id TaskID, agent AgentID, req ClaimRequest) (Task, error)
	Release(ctx context.Context, id TaskID, token string) error
	Complete(ctx context.Context, id TaskID, token string) error
}

// RenewingBoard is a Board whose leases can be renewed.
type RenewingBoard interface {
	Board
	Renew(ctx context.Context, id TaskID, token string, req ClaimRequest) (Task, error)
}

// FailingBoard is a Board whose holders can mark a task failed (SPEC 3.6).
type FailingBoard interface {
	Board
	Fail(ctx context.Context, id TaskID, token string) error
}
