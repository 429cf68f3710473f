// Package protocol serves a taskboard.Board to the Python checker over the board protocol
// (SPEC 10): JSON lines on stdin and stdout. A host needs about five lines:
//
//	func main() {
//		protocol.Main(protocol.Host{Name: "myboard", Durable: true, New: newBoard, Connect: connect})
//	}
package protocol

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	taskboard "github.com/taskboard-contract/taskboard/go"
)

// Clock is the time a board reads: the protocol's set_time in manual mode, the system clock
// in wall mode.
type Clock interface{ Now() time.Time }

// Host is what a board command serves.
type Host struct {
	Name    string
	Durable bool
	// New makes fresh storage holding tasks; it returns the board and a name of the storage
	// that Connect opens in another process.
	New func(tasks []taskboard.Task, clock Clock) (taskboard.Board, string, error)
	// Connect, when set, opens another client of the storage New named (SPEC 8).
	Connect func(storage string, clock Clock) (taskboard.Board, error)
	// Remove, when set, removes the storage New made; run on close by the process that ran init.
	Remove func(storage string) error
	// NoRenew and NoFail say the board has no Renew or Fail: hello does not declare them,
	// and the op is answered unsupported.
	NoRenew, NoFail bool
	// YieldPoints says the board marks with YieldPoint every place inside a call where
	// another process's call may come in (a call is atomic between its points). In a
	// controlled race the checker then runs the processes' calls one at a time, from
	// request to point to answer, in an order it draws and replays exactly. Without it,
	// YieldPoint returns at once and the processes race as the operating system runs them.
	YieldPoints bool
}

// heardClock is the system clock until the checker says what time it is (init in manual
// mode, set_time), then the time it last said. A client process after connect hears
// set_time before its first call in manual mode, and nothing in wall mode.
type heardClock struct {
	mu    sync.Mutex
	heard *time.Time
}

func (c *heardClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.heard == nil {
		return time.Now()
	}
	return *c.heard
}

func (c *heardClock) hear(us *int64) {
	if us == nil {
		return
	}
	t := fromMicros(*us)
	c.mu.Lock()
	c.heard = &t
	c.mu.Unlock()
}

type wireLease struct {
	Token string `json:"token"`
	Fence uint64 `json:"fence"`
	Until *int64 `json:"until"`
}

type wireTask struct {
	ID    string     `json:"id"`
	Title string     `json:"title"`
	Deps  []string   `json:"deps"`
	State string     `json:"state"`
	Owner string     `json:"owner"`
	Lease *wireLease `json:"lease"`
	Seq   uint64     `json:"seq"`
}

type request struct {
	ID          int64      `json:"id"`
	Op          string     `json:"op"`
	YieldPoints bool       `json:"yield_points"`
	Tasks       []wireTask `json:"tasks"`
	Clock       string     `json:"clock"`
	Now         *int64     `json:"now"`
	Storage     string     `json:"storage"`
	Task        string     `json:"task"`
	Agent       string     `json:"agent"`
	Token       string     `json:"token"`
	TTL         int64      `json:"ttl"`
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func toWire(t taskboard.Task) wireTask {
	deps := make([]string, 0, len(t.Deps))
	for _, d := range t.Deps {
		deps = append(deps, string(d))
	}
	w := wireTask{ID: string(t.ID), Title: t.Title, Deps: deps, State: string(t.State), Owner: string(t.Owner), Seq: t.Seq}
	if t.State == taskboard.StateClaimed {
		l := &wireLease{Token: t.Lease.Token, Fence: uint64(t.Lease.Fence)}
		if !t.Lease.Until.IsZero() {
			u := micros(t.Lease.Until)
			l.Until = &u
		}
		w.Lease = l
	}
	return w
}

func fromWire(w wireTask) taskboard.Task {
	deps := make([]taskboard.TaskID, 0, len(w.Deps))
	for _, d := range w.Deps {
		deps = append(deps, taskboard.TaskID(d))
	}
	t := taskboard.Task{ID: taskboard.TaskID(w.ID), Title: w.Title, Deps: deps, State: taskboard.State(w.State), Owner: taskboard.AgentID(w.Owner), Seq: w.Seq}
	if w.Lease != nil {
		t.Lease = taskboard.Lease{Token: w.Lease.Token, Fence: taskboard.Fence(w.Lease.Fence)}
		if w.Lease.Until != nil {
			t.Lease.Until = fromMicros(*w.Lease.Until)
		}
	}
	return t
}

var codes = []struct {
	err  error
	code string
}{
	{taskboard.ErrNotFound, "not_found"},
	{taskboard.ErrTaken, "taken"},
	{taskboard.ErrBlocked, "blocked"},
	{taskboard.ErrTerminal, "terminal"},
	{taskboard.ErrLeaseLost, "lease_lost"},
	{taskboard.ErrInvalid, "invalid"},
}

var errUnsupported = errors.New("unsupported")

type server struct {
	host    Host
	board   taskboard.Board
	clock   *heardClock
	storage string
	owner   bool
}

func (s *server) ops() []string {
	ops := []string{}
	if !s.host.NoRenew {
		ops = append(ops, "renew")
	}
	if !s.host.NoFail {
		ops = append(ops, "fail")
	}
	if s.host.Connect != nil {
		ops = append(ops, "connect")
	}
	return ops
}

// reply is one answer line. Exactly one of the results is set on a successful op that has
// one; a failed op sets Error and Message, and an op without a result sets none.
type reply struct {
	ID      int64  `json:"id"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	*helloResult
	*initResult
	*taskResult
	*listResult
}

type helloResult struct {
	Protocol    int      `json:"protocol"`
	Name        string   `json:"name"`
	Ops         []string `json:"ops"`
	Durable     bool     `json:"durable"`
	YieldPoints bool     `json:"yield_points"`
}

type initResult struct {
	Storage string `json:"storage"`
}

type taskResult struct {
	Task wireTask `json:"task"`
}

type listResult struct {
	Tasks []wireTask `json:"tasks"`
}

// handle serves one request: its reply carries the op's result, and the error, if any, is
// the op's refusal or the board's trouble.
func (s *server) handle(ctx context.Context, r request) (reply, error) {
	var none reply
	switch r.Op {
	case "hello":
		return reply{helloResult: &helloResult{Protocol: 1, Name: s.host.Name, Ops: s.ops(), Durable: s.host.Durable, YieldPoints: s.host.YieldPoints}}, nil
	case "connect":
		if s.host.Connect == nil {
			return none, errUnsupported
		}
		if r.Clock == "manual" {
			s.clock.hear(r.Now)
		}
		board, err := s.host.Connect(r.Storage, s.clock)
		s.board = board
		return none, err
	case "init":
		if r.Clock == "manual" {
			s.clock.hear(r.Now)
		}
		tasks := make([]taskboard.Task, 0, len(r.Tasks))
		for _, w := range r.Tasks {
			tasks = append(tasks, fromWire(w))
		}
		board, storage, err := s.host.New(tasks, s.clock)
		s.board, s.storage, s.owner = board, storage, true
		return reply{initResult: &initResult{Storage: storage}}, err
	case "set_time":
		s.clock.hear(r.Now)
		return none, nil
	case "close":
		if s.owner && s.host.Remove != nil {
			return none, s.host.Remove(s.storage)
		}
		return none, nil
	}
	if s.board == nil {
		return none, fmt.Errorf("%s before init", r.Op)
	}
	id, req := taskboard.TaskID(r.Task), taskboard.ClaimRequest{TTL: time.Duration(r.TTL) * time.Microsecond}
	switch r.Op {
	case "list":
		tasks, err := s.board.List(ctx)
		wire := make([]wireTask, 0, len(tasks))
		for _, t := range tasks {
			wire = append(wire, toWire(t))
		}
		return reply{listResult: &listResult{Tasks: wire}}, err
	case "claim":
		t, err := s.board.Claim(ctx, id, taskboard.AgentID(r.Agent), req)
		return reply{taskResult: &taskResult{Task: toWire(t)}}, err
	case "renew":
		rb, ok := s.board.(taskboard.RenewingBoard)
		if !ok || s.host.NoRenew { // an op hello did not declare
			return none, errUnsupported
		}
		t, err := rb.Renew(ctx, id, r.Token, req)
		return reply{taskResult: &taskResult{Task: toWire(t)}}, err
	case "release":
		return none, s.board.Release(ctx, id, r.Token)
	case "complete":
		return none, s.board.Complete(ctx, id, r.Token)
	case "fail":
		fb, ok := s.board.(taskboard.FailingBoard)
		if !ok || s.host.NoFail {
			return none, errUnsupported
		}
		return none, fb.Fail(ctx, id, r.Token)
	}
	return none, errUnsupported
}

// lines are the requests on in, and the board's stops at its points mid-request
// (YieldPoint): a stop writes a yield line and reads on until the checker's go; the requests
// read meanwhile (a list written behind the call) are served after the current one.
type lines struct {
	mu      sync.Mutex
	reader  *bufio.Reader
	writer  *bufio.Writer
	pending [][]byte
	// offered: the checker's hello offered to take yield lines. current is the id of the
	// request being served, and ended the input's end or error met at a stop.
	offered bool
	current int64
	ended   error
}

func (l *lines) next() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) > 0 {
		line := l.pending[0]
		l.pending = l.pending[1:]
		return line, nil
	}
	if l.ended != nil {
		return nil, l.ended
	}
	line, err := l.reader.ReadBytes('\n')
	if len(line) == 0 && err != nil {
		return nil, err
	}
	return line, nil
}

func (l *lines) stop(label string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.offered || l.ended != nil {
		return
	}
	encoded, err := json.Marshal(struct {
		ID    int64  `json:"id"`
		Yield string `json:"yield"`
	}{l.current, label})
	if err == nil {
		_, err = l.writer.Write(append(encoded, '\n'))
	}
	if err == nil {
		err = l.writer.Flush()
	}
	for err == nil {
		var line []byte
		line, err = l.reader.ReadBytes('\n')
		if len(line) == 0 {
			break
		}
		var r request
		if json.Unmarshal(line, &r) == nil && r.Op == "go" && r.ID == l.current {
			return
		}
		l.pending = append(l.pending, line)
	}
	if err == nil {
		err = io.EOF
	}
	// The checker is gone: the call goes on, and Serve stops after its answer.
	l.ended = err
}

type linesKey struct{}

// YieldPoint marks a scheduling point inside a board's call: a place where another
// process's call may come in between (after a read, before the write that depends on it).
// In a controlled race of the checker (taskboard fuzz --race-scheduling controlled) the call
// stops here until the checker's scheduler lets it go on, so the race between processes is
// explored as a drawn, replayable interleaving. Anywhere else it returns at once: ctx is not
// a call served by Serve, the Host does not declare YieldPoints, or the checker did not
// offer to take points. label names the point in the checker's reports. Hold no lock
// another process needs while you yield.
func YieldPoint(ctx context.Context, label string) {
	if l, ok := ctx.Value(linesKey{}).(*lines); ok {
		l.stop(label)
	}
}

// Serve answers requests from in on out until close or the end of in. It returns nil then,
// and an error when a line is not JSON or an answer cannot be written (a closed out).
func Serve(host Host, in io.Reader, out io.Writer) error {
	s := &server{host: host, clock: &heardClock{}}
	l := &lines{reader: bufio.NewReaderSize(in, 1<<16), writer: bufio.NewWriter(out)}
	ctx := context.WithValue(context.Background(), linesKey{}, l)
	for {
		line, err := l.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var r request
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("a request that is not JSON: %w", err)
		}
		l.mu.Lock()
		l.current = r.ID
		if r.Op == "hello" {
			l.offered = r.YieldPoints && host.YieldPoints
		}
		l.mu.Unlock()
		answer, opErr := s.handle(ctx, r)
		if opErr != nil {
			answer = reply{Error: codeOf(opErr), Message: opErr.Error()}
		}
		answer.ID, answer.OK = r.ID, opErr == nil
		if err := l.answer(r.Op, answer); err != nil {
			return err
		}
		if r.Op == "close" {
			return nil
		}
	}
}

// answer writes one answer line and flushes it.
func (l *lines) answer(op string, answer reply) error {
	encoded, err := json.Marshal(answer)
	if err != nil {
		return fmt.Errorf("encoding the answer to %s: %w", op, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// A write error is kept by the bufio.Writer and returned by Flush too; the checker
	// reads a closed stdout as the board's fault, so this process stops here.
	if _, err := l.writer.Write(append(encoded, '\n')); err != nil {
		return fmt.Errorf("writing the answer to %s: %w", op, err)
	}
	if err := l.writer.Flush(); err != nil {
		return fmt.Errorf("writing the answer to %s: %w", op, err)
	}
	return nil
}

func codeOf(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	if errors.Is(err, errUnsupported) {
		return "unsupported"
	}
	// Any other error is the board's own trouble: a code the checker reports as a fault.
	return "internal"
}

// Main serves host on stdin and stdout and exits: 0 after close, 1 on an error.
func Main(host Host) {
	if err := Serve(host, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
