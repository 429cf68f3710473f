// Command fileboard is the Go reference board: tasks in a JSON file, every change one
// read-modify-write under an exclusive flock (a list shares the lock with other readers), so
// clients in other processes are real.
//
//	fileboard [-dir DIR] [-mutant NAME]
//
// The mutants are realistic bugs the checker must catch: release-ignores-token,
// fence-kept-on-takeover and claim-atomic-in-process.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	taskboard "github.com/taskboard-contract/taskboard/go"
	"github.com/taskboard-contract/taskboard/go/protocol"
)

type stored struct {
	Tasks  []taskboard.Task            `json:"tasks"`
	Fences map[taskboard.TaskID]uint64 `json:"fences"`
}

type fileBoard struct {
	path string
	// file stays open for the process's life: each call locks it, reads it and rewrites it
	// in place, so every process sees every write (the inode never changes).
	file   *os.File
	clock  protocol.Clock
	mutant string
	// process guards this process's own calls; only the claim-atomic-in-process mutant
	// relies on it alone.
	process sync.Mutex
}

var mutants = map[string]bool{"": true, "release-ignores-token": true, "fence-kept-on-takeover": true, "claim-atomic-in-process": true}

func main() {
	dir := flag.String("dir", os.TempDir(), "where the board files go")
	mutant := flag.String("mutant", "", "a planted bug: release-ignores-token, fence-kept-on-takeover, claim-atomic-in-process")
	flag.Parse()
	if !mutants[*mutant] {
		fmt.Fprintf(os.Stderr, "fileboard: unknown mutant %q\n", *mutant)
		os.Exit(2)
	}
	name := "fileboard"
	if *mutant != "" {
		name += " (" + *mutant + ")"
	}
	protocol.Main(protocol.Host{
		Name:    name,
		Durable: true,
		New: func(tasks []taskboard.Task, clock protocol.Clock) (taskboard.Board, string, error) {
			f, err := os.CreateTemp(*dir, "taskboard-fileboard-*.json")
			if err != nil {
				return nil, "", err
			}
			b := &fileBoard{path: f.Name(), file: f, clock: clock, mutant: *mutant}
			return b, b.path, b.write(stored{Tasks: tasks, Fences: map[taskboard.TaskID]uint64{}})
		},
		Connect: func(storage string, clock protocol.Clock) (taskboard.Board, error) {
			f, err := os.OpenFile(storage, os.O_RDWR, 0)
			if err != nil {
				return nil, err
			}
			return &fileBoard{path: storage, file: f, clock: clock, mutant: *mutant}, nil
		},
		Remove: os.Remove,
		// Each call is one flock transaction, but for the claim-atomic-in-process mutant's
		// claim, which marks the point between its two.
		YieldPoints: true,
	})
}

func (b *fileBoard) write(s stored) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = b.file.WriteAt(data, 0)
	return err
}

// locked runs change on the stored board under an exclusive flock of its file; change says
// whether it wrote. The read and the write go through the locked descriptor: one open a call.
func (b *fileBoard) locked(change func(s *stored) (bool, error)) error {
	return b.withFile(syscall.LOCK_EX, func(f *os.File, s *stored) error {
		wrote, err := change(s)
		if err != nil || !wrote {
			return err
		}
		data, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if err := f.Truncate(0); err != nil {
			return err
		}
		_, err = f.WriteAt(data, 0)
		return err
	})
}

// withFile takes flock(how) on the board's file and hands use the stored board.
func (b *fileBoard) withFile(how int, use func(f *os.File, s *stored) error) error {
	f := b.file
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var s stored
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	return use(f, &s)
}

func find(s *stored, id taskboard.TaskID) *taskboard.Task {
	for i := range s.Tasks {
		if s.Tasks[i].ID == id {
			return &s.Tasks[i]
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

func (b *fileBoard) List(ctx context.Context) ([]taskboard.Task, error) {
	var tasks []taskboard.Task
	// A read shares the lock with other readers: only writers exclude each other.
	err := b.withFile(syscall.LOCK_SH, func(_ *os.File, s *stored) error { tasks = s.Tasks; return nil })
	return tasks, err
}

// admit says why a claim of t is refused, if it is (SPEC 3.1 steps 1 to 5).
func admit(s *stored, id taskboard.TaskID, agent taskboard.AgentID, now time.Time) error {
	t := find(s, id)
	if t == nil {
		return taskboard.ErrNotFound
	}
	if t.State == taskboard.StateDone {
		return taskboard.ErrTerminal
	}
	for _, dep := range t.Deps {
		if d := find(s, dep); d == nil || d.State != taskboard.StateDone {
			return taskboard.ErrBlocked
		}
	}
	if live(t, now) {
		return taskboard.ErrTaken
	}
	if agent == "" {
		return taskboard.ErrInvalid
	}
	return nil
}

func (b *fileBoard) grant(s *stored, id taskboard.TaskID, agent taskboard.AgentID, req taskboard.ClaimRequest, now time.Time) taskboard.Task {
	t := find(s, id)
	fence := s.Fences[id] + 1
	if b.mutant == "fence-kept-on-takeover" && t.State == taskboard.StateClaimed {
		fence = uint64(t.Lease.Fence)
	}
	s.Fences[id] = fence
	t.State, t.Owner, t.Seq = taskboard.StateClaimed, agent, t.Seq+1
	t.Lease = taskboard.Lease{Token: token(), Fence: taskboard.Fence(fence), Until: until(now, req.TTL)}
	return *t
}

func (b *fileBoard) Claim(ctx context.Context, id taskboard.TaskID, agent taskboard.AgentID, req taskboard.ClaimRequest) (taskboard.Task, error) {
	b.process.Lock()
	defer b.process.Unlock()
	now := b.clock.Now()
	var got taskboard.Task
	if b.mutant == "claim-atomic-in-process" {
		// The check and the write are two file transactions: atomic only in this process.
		if err := b.locked(func(s *stored) (bool, error) { return false, admit(s, id, agent, now) }); err != nil {
			return got, err
		}
		// Another process's call may come in here: a point the checker can schedule.
		protocol.YieldPoint(ctx, "claim checked, not yet written")
		return got, b.locked(func(s *stored) (bool, error) { got = b.grant(s, id, agent, req, now); return true, nil })
	}
	err := b.locked(func(s *stored) (bool, error) {
		if err := admit(s, id, agent, now); err != nil {
			return false, err
		}
		got = b.grant(s, id, agent, req, now)
		return true, nil
	})
	return got, err
}

// held finds the task that token holds (SPEC 3.2 to 3.6), or says why it does not.
func (b *fileBoard) held(s *stored, id taskboard.TaskID, tok string, checkToken bool) (*taskboard.Task, error) {
	t := find(s, id)
	if t == nil {
		return nil, taskboard.ErrNotFound
	}
	if t.State != taskboard.StateClaimed || (checkToken && t.Lease.Token != tok) {
		return nil, taskboard.ErrLeaseLost
	}
	return t, nil
}

func (b *fileBoard) finish(id taskboard.TaskID, tok string, state taskboard.State, checkToken bool) error {
	b.process.Lock()
	defer b.process.Unlock()
	return b.locked(func(s *stored) (bool, error) {
		t, err := b.held(s, id, tok, checkToken)
		if err != nil {
			return false, err
		}
		t.State, t.Owner, t.Lease, t.Seq = state, "", taskboard.Lease{}, t.Seq+1
		return true, nil
	})
}

func (b *fileBoard) Release(ctx context.Context, id taskboard.TaskID, tok string) error {
	return b.finish(id, tok, taskboard.StateOpen, b.mutant != "release-ignores-token")
}

func (b *fileBoard) Complete(ctx context.Context, id taskboard.TaskID, tok string) error {
	return b.finish(id, tok, taskboard.StateDone, true)
}

func (b *fileBoard) Fail(ctx context.Context, id taskboard.TaskID, tok string) error {
	return b.finish(id, tok, taskboard.StateFailed, true)
}

func (b *fileBoard) Renew(ctx context.Context, id taskboard.TaskID, tok string, req taskboard.ClaimRequest) (taskboard.Task, error) {
	b.process.Lock()
	defer b.process.Unlock()
	now := b.clock.Now()
	var got taskboard.Task
	err := b.locked(func(s *stored) (bool, error) {
		t, err := b.held(s, id, tok, true)
		if err != nil {
			return false, err
		}
		if !live(t, now) {
			return false, taskboard.ErrLeaseLost
		}
		t.Lease.Until, t.Seq = until(now, req.TTL), t.Seq+1
		got = *t
		return true, nil
	})
	return got, err
}
