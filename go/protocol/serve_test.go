package protocol_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	taskboard "github.com/taskboard-contract/taskboard/go"
	"github.com/taskboard-contract/taskboard/go/memboard"
	"github.com/taskboard-contract/taskboard/go/protocol"
)

var host = protocol.Host{
	Name:   "memboard",
	NoFail: true,
	New: func(tasks []taskboard.Task, clock protocol.Clock) (taskboard.Board, string, error) {
		return memboard.New(tasks, clock), "in-memory", nil
	},
}

func serve(t *testing.T, requests ...string) []string {
	t.Helper()
	var out strings.Builder
	if err := protocol.Serve(host, strings.NewReader(strings.Join(requests, "\n")+"\n"), &out); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

// TestServeAnswersEachOpWithItsTypedResult: each op's answer carries exactly its result's
// fields, as SPEC 10 spells them.
func TestServeAnswersEachOpWithItsTypedResult(t *testing.T) {
	got := serve(t,
		`{"id":1,"op":"hello","protocol":1}`,
		`{"id":2,"op":"init","tasks":[{"id":"t1","title":"build","deps":[],"state":"open","owner":"","lease":null,"seq":0}],"clock":"manual","now":1767225600000000}`,
		`{"id":3,"op":"claim","task":"t1","agent":"a1","ttl":0}`,
		`{"id":4,"op":"claim","task":"t1","agent":"a2","ttl":5000}`,
		`{"id":5,"op":"release","task":"t1","token":"nope"}`,
		`{"id":6,"op":"fail","task":"t1","token":"nope"}`,
		`{"id":7,"op":"set_time","now":1767225600005000}`,
		`{"id":8,"op":"close"}`,
		`{"id":9,"op":"list"}`,
	)
	want := []string{
		`{"id":1,"ok":true,"protocol":1,"name":"memboard","ops":["renew"],"durable":false,"yield_points":false}`,
		`{"id":2,"ok":true,"storage":"in-memory"}`,
		`{"id":3,"ok":true,"task":{"id":"t1","title":"build","deps":[],"state":"claimed","owner":"a1","lease":{"token":"TOKEN","fence":1,"until":null},"seq":1}}`,
		`{"id":4,"ok":false,"error":"taken","message":"taskboard: task is held by a live lease"}`,
		`{"id":5,"ok":false,"error":"lease_lost","message":"taskboard: the token no longer holds the task"}`,
		`{"id":6,"ok":false,"error":"unsupported","message":"unsupported"}`,
		`{"id":7,"ok":true}`,
		`{"id":8,"ok":true}`,
	}
	if len(got) != len(want) {
		t.Fatalf("%d answers, want %d (nothing after close): %q", len(got), len(want), got)
	}
	for i := range want {
		line := got[i]
		if at := strings.Index(line, `"token":"`); at >= 0 {
			end := strings.Index(line[at+9:], `"`)
			line = line[:at+9] + "TOKEN" + line[at+9+end:]
		}
		if line != want[i] {
			t.Errorf("answer %d:\n got %s\nwant %s", i+1, line, want[i])
		}
	}
}

// TestServeListAnswersAnEmptyListAndRequestsBeforeInitFail: list on an empty board is
// "tasks":[], and a board op before init is the board's own trouble (internal).
func TestServeListAnswersAnEmptyListAndRequestsBeforeInitFail(t *testing.T) {
	got := serve(t, `{"id":1,"op":"list"}`, `{"id":2,"op":"init","tasks":[],"clock":"wall","now":0}`, `{"id":3,"op":"list"}`)
	want := []string{
		`{"id":1,"ok":false,"error":"internal","message":"list before init"}`,
		`{"id":2,"ok":true,"storage":"in-memory"}`,
		`{"id":3,"ok":true,"tasks":[]}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

type closedPipe struct{}

var errClosed = errors.New("broken pipe")

func (closedPipe) Write([]byte) (int, error) { return 0, errClosed }

// TestServeReturnsTheWriteError: an answer that cannot be written (the checker closed the
// pipe) ends Serve with that error, naming the op.
func TestServeReturnsTheWriteError(t *testing.T) {
	err := protocol.Serve(host, strings.NewReader(`{"id":1,"op":"hello","protocol":1}`+"\n"), closedPipe{})
	if !errors.Is(err, errClosed) || !strings.Contains(err.Error(), "hello") {
		t.Fatalf("Serve = %v; want the write error, naming hello", err)
	}
}

// TestServeRejectsALineThatIsNotJSON: a line that is not JSON ends Serve with an error.
func TestServeRejectsALineThatIsNotJSON(t *testing.T) {
	var out strings.Builder
	err := protocol.Serve(host, strings.NewReader("{oops\n"), &out)
	if err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("Serve = %v; want a not-JSON error", err)
	}
}

// yieldingBoard stops at a point of its own in every claim, before it claims.
type yieldingBoard struct{ *memboard.Board }

func (b yieldingBoard) Claim(ctx context.Context, id taskboard.TaskID, agent taskboard.AgentID, req taskboard.ClaimRequest) (taskboard.Task, error) {
	protocol.YieldPoint(ctx, "before the claim")
	return b.Board.Claim(ctx, id, agent, req)
}

var yieldingHost = protocol.Host{
	Name:        "yielding",
	NoFail:      true,
	YieldPoints: true,
	New: func(tasks []taskboard.Task, clock protocol.Clock) (taskboard.Board, string, error) {
		return yieldingBoard{memboard.New(tasks, clock)}, "in-memory", nil
	},
}

func serveYielding(t *testing.T, requests ...string) []string {
	t.Helper()
	var out strings.Builder
	if err := protocol.Serve(yieldingHost, strings.NewReader(strings.Join(requests, "\n")+"\n"), &out); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

// TestYieldPointStopsUntilGoAndServesWhatCameMeanwhileAfter: offered yields, a claim writes
// its yield line and goes on at the checker's go; a list written behind the claim is
// answered after the claim, in order.
func TestYieldPointStopsUntilGoAndServesWhatCameMeanwhileAfter(t *testing.T) {
	got := serveYielding(t,
		`{"id":1,"op":"hello","protocol":1,"yield_points":true}`,
		`{"id":2,"op":"init","tasks":[{"id":"t1","title":"build","deps":[],"state":"open","owner":"","lease":null,"seq":0}],"clock":"manual","now":1767225600000000}`,
		`{"id":3,"op":"claim","task":"t1","agent":"a1","ttl":0}`,
		`{"id":4,"op":"list"}`,
		`{"id":3,"op":"go"}`,
		`{"id":5,"op":"close"}`,
	)
	want := []string{`"id":1,"ok":true`, `"id":2,"ok":true`, `{"id":3,"yield":"before the claim"}`, `"id":3,"ok":true`, `"id":4,"ok":true`, `"id":5,"ok":true`}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("line %d: got %s, want it to hold %s", i+1, got[i], want[i])
		}
	}
}

// TestYieldPointReturnsAtOnceUnlessOffered: a checker that did not offer yields (an older
// one) never sees a yield line.
func TestYieldPointReturnsAtOnceUnlessOffered(t *testing.T) {
	got := serveYielding(t,
		`{"id":1,"op":"hello","protocol":1}`,
		`{"id":2,"op":"init","tasks":[{"id":"t1","title":"build","deps":[],"state":"open","owner":"","lease":null,"seq":0}],"clock":"manual","now":1767225600000000}`,
		`{"id":3,"op":"claim","task":"t1","agent":"a1","ttl":0}`,
	)
	if len(got) != 3 || strings.Contains(strings.Join(got, "\n"), "yield\":\"") {
		t.Fatalf("got %q; want three answers and no yield", got)
	}
}

// TestYieldPointReturnsAtOnceUnlessDeclared: a host that does not declare YieldPoints says
// so in hello and writes no yield line, even offered: its processes race free.
func TestYieldPointReturnsAtOnceUnlessDeclared(t *testing.T) {
	undeclared := yieldingHost
	undeclared.YieldPoints = false
	var out strings.Builder
	requests := []string{
		`{"id":1,"op":"hello","protocol":1,"yield_points":true}`,
		`{"id":2,"op":"init","tasks":[{"id":"t1","title":"build","deps":[],"state":"open","owner":"","lease":null,"seq":0}],"clock":"manual","now":1767225600000000}`,
		`{"id":3,"op":"claim","task":"t1","agent":"a1","ttl":0}`,
	}
	if err := protocol.Serve(undeclared, strings.NewReader(strings.Join(requests, "\n")+"\n"), &out); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != 3 || !strings.Contains(got[0], `"yield_points":false`) || strings.Contains(got[2], `"yield":`) {
		t.Fatalf("got %q; want hello declaring no yield points, and no yield", got)
	}
}

// TestYieldPointAtTheEndOfInputEndsServe: when the input ends while a call waits for its go
// (the checker is gone), the call goes on and Serve returns nil after it.
func TestYieldPointAtTheEndOfInputEndsServe(t *testing.T) {
	got := serveYielding(t,
		`{"id":1,"op":"hello","protocol":1,"yield_points":true}`,
		`{"id":2,"op":"init","tasks":[{"id":"t1","title":"build","deps":[],"state":"open","owner":"","lease":null,"seq":0}],"clock":"manual","now":1767225600000000}`,
		`{"id":3,"op":"claim","task":"t1","agent":"a1","ttl":0}`,
	)
	if len(got) != 4 || got[2] != `{"id":3,"yield":"before the claim"}` {
		t.Fatalf("got %q; want hello, init, the yield and the claim's answer", got)
	}
}

// TestYieldPointOutsideServeReturnsAtOnce: a board's point in a call not served by Serve (its
// own tests) does nothing.
func TestYieldPointOutsideServeReturnsAtOnce(t *testing.T) {
	protocol.YieldPoint(context.Background(), "nowhere")
}
