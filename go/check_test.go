package taskboard_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	taskboard "github.com/taskboard-contract/taskboard/go"
)

func claimed(id taskboard.TaskID, deps ...taskboard.TaskID) taskboard.Task {
	return taskboard.Task{ID: id, Deps: deps, State: taskboard.StateClaimed, Owner: "a1", Lease: taskboard.Lease{Token: "tok-" + string(id), Fence: 1}}
}

func done(id taskboard.TaskID, deps ...taskboard.TaskID) taskboard.Task {
	return taskboard.Task{ID: id, Deps: deps, State: taskboard.StateDone}
}

func open(id taskboard.TaskID, deps ...taskboard.TaskID) taskboard.Task {
	return taskboard.Task{ID: id, Deps: deps, State: taskboard.StateOpen}
}

// TestCheckHealthySnapshotHasNoProblems: a consistent snapshot, an expired lease included,
// gives nil.
func TestCheckHealthySnapshotHasNoProblems(t *testing.T) {
	expired := claimed("c", "a")
	expired.Lease.Until = time.Unix(1, 0)
	got := taskboard.Check([]taskboard.Task{done("a"), open("b", "a"), expired, {ID: "f", State: taskboard.StateFailed}})
	if got != nil {
		t.Fatalf("Check found %v in a healthy snapshot", got)
	}
}

// TestCheckEachCode: each of the ten codes, with the text that says why.
func TestCheckEachCode(t *testing.T) {
	noToken := claimed("n")
	noToken.Lease.Token = ""
	leasedOpen := open("o")
	leasedOpen.Owner, leasedOpen.Lease = "a2", taskboard.Lease{Token: "x", Fence: 3}
	doneOwned := done("d")
	doneOwned.Owner = "a3"
	cases := []struct {
		tasks []taskboard.Task
		want  taskboard.Problem
	}{
		{[]taskboard.Task{open("")}, taskboard.Problem{Task: "", Code: taskboard.CodeEmptyID, Text: "id is empty"}},
		{[]taskboard.Task{open("a"), open("a"), open("a")}, taskboard.Problem{Task: "a", Code: taskboard.CodeDuplicateID, Text: "id occurs 3 times"}},
		{[]taskboard.Task{{ID: "a", State: "lost"}}, taskboard.Problem{Task: "a", Code: taskboard.CodeUnknownState, Text: `state "lost" is not one of open, claimed, done, failed`}},
		{[]taskboard.Task{open("a", "ghost")}, taskboard.Problem{Task: "a", Code: taskboard.CodeUnknownDep, Text: `depends on unknown task "ghost"`}},
		{[]taskboard.Task{open("a", "a")}, taskboard.Problem{Task: "a", Code: taskboard.CodeSelfDep, Text: "depends on itself"}},
		{[]taskboard.Task{{ID: "c", State: taskboard.StateClaimed}}, taskboard.Problem{Task: "c", Code: taskboard.CodeClaimedNoLease, Text: "claimed without owner or lease"}},
		{[]taskboard.Task{noToken}, taskboard.Problem{Task: "n", Code: taskboard.CodeClaimedNoLease, Text: "claimed without lease token"}},
		{[]taskboard.Task{leasedOpen}, taskboard.Problem{Task: "o", Code: taskboard.CodeLeaseNoClaim, Text: `open but has owner "a2" and a lease`}},
		{[]taskboard.Task{doneOwned}, taskboard.Problem{Task: "d", Code: taskboard.CodeTerminalClaimed, Text: `done but still has owner "a3"`}},
		{[]taskboard.Task{open("a"), claimed("c", "a")}, taskboard.Problem{Task: "c", Code: taskboard.CodeBlockedClaim, Text: "claimed while dependency not done: a"}},
		{[]taskboard.Task{open("a", "b"), open("b", "a")}, taskboard.Problem{Task: "a", Code: taskboard.CodeCycle, Text: "on a dependency cycle: a -> b -> a"}},
	}
	for _, c := range cases {
		got := taskboard.Check(c.tasks)
		if len(got) == 0 || got[0] != c.want {
			t.Errorf("Check(%v) = %v, want first %v", c.tasks, got, c.want)
		}
	}
}

// TestCheckOrdersByTaskCodeText: problems come sorted by task, then code, then text.
func TestCheckOrdersByTaskCodeText(t *testing.T) {
	got := taskboard.Check([]taskboard.Task{
		open("b", "y", "x"), {ID: "a", State: taskboard.StateClaimed, Deps: []taskboard.TaskID{"b"}}, open("b"),
	})
	want := []taskboard.Problem{
		{Task: "a", Code: taskboard.CodeBlockedClaim, Text: "claimed while dependency not done: b"},
		{Task: "a", Code: taskboard.CodeClaimedNoLease, Text: "claimed without owner or lease"},
		{Task: "b", Code: taskboard.CodeDuplicateID, Text: "id occurs 2 times"},
		{Task: "b", Code: taskboard.CodeUnknownDep, Text: `depends on unknown task "x"`},
		{Task: "b", Code: taskboard.CodeUnknownDep, Text: `depends on unknown task "y"`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Check = %v\nwant %v", got, want)
	}
}

// TestCheckDuplicatesAreOneTask: entries of one id give one problem per code, and a
// dependency is done only if every entry of it is.
func TestCheckDuplicatesAreOneTask(t *testing.T) {
	second := open("c")
	second.Owner = "x"
	first := open("c")
	first.Owner = "w"
	got := taskboard.Check([]taskboard.Task{second, first, done("d"), open("d"), claimed("e", "d", "e")})
	want := []taskboard.Problem{
		{Task: "c", Code: taskboard.CodeDuplicateID, Text: "id occurs 2 times"},
		{Task: "c", Code: taskboard.CodeLeaseNoClaim, Text: `open but has owner "w"`},
		{Task: "d", Code: taskboard.CodeDuplicateID, Text: "id occurs 2 times"},
		{Task: "e", Code: taskboard.CodeBlockedClaim, Text: "claimed while dependencies not done: d, e"},
		{Task: "e", Code: taskboard.CodeSelfDep, Text: "depends on itself"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Check = %v\nwant %v", got, want)
	}
}

// TestCheckNamesAShortestCycleThroughEachTask: in a small component each task's text is a
// shortest cycle read from it; a self loop is no dep_cycle.
func TestCheckNamesAShortestCycleThroughEachTask(t *testing.T) {
	got := cycleTexts(taskboard.Check([]taskboard.Task{
		open("a", "b"), open("b", "c", "a"), open("c", "a"), open("s", "s"),
	}))
	want := map[taskboard.TaskID]string{"a": "a -> b -> a", "b": "b -> a -> b", "c": "c -> a -> b -> c"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("cycles %v, want %v", got, want)
	}
}

func cycleTexts(problems []taskboard.Problem) map[taskboard.TaskID]string {
	texts := map[taskboard.TaskID]string{}
	for _, p := range problems {
		if p.Code == taskboard.CodeCycle {
			texts[p.Task] = strings.TrimPrefix(p.Text, "on a dependency cycle: ")
		}
	}
	return texts
}

// TestCheckCutsLongCyclesShort: a ring of 100 tasks names eight tasks from each and the
// ring's length.
func TestCheckCutsLongCyclesShort(t *testing.T) {
	var tasks []taskboard.Task
	for i := 0; i < 100; i++ {
		tasks = append(tasks, open(ringID(i), ringID((i+1)%100)))
	}
	got := cycleTexts(taskboard.Check(tasks))
	if len(got) != 100 {
		t.Fatalf("%d tasks on the cycle, want 100", len(got))
	}
	if want := "t098 -> t099 -> t000 -> t001 -> t002 -> t003 -> t004 -> t005 -> ... (100 tasks)"; got["t098"] != want {
		t.Fatalf("t098: %q, want %q", got["t098"], want)
	}
}

func ringID(i int) taskboard.TaskID { return taskboard.TaskID(fmt.Sprintf("t%03d", i)) }

// TestCheckLargeComponentCyclesAreRealAndSimple: in a large component that is not one
// ring, each task's text is a simple cycle through it along real dependencies.
func TestCheckLargeComponentCyclesAreRealAndSimple(t *testing.T) {
	const n = 80
	deps := map[taskboard.TaskID][]taskboard.TaskID{}
	for i := 0; i < n; i++ {
		deps[ringID(i)] = append(deps[ringID(i)], ringID((i+1)%n))
		if i%7 == 0 {
			deps[ringID(i)] = append(deps[ringID(i)], ringID((i*13+5)%n))
		}
	}
	var tasks []taskboard.Task
	for id, d := range deps {
		tasks = append(tasks, open(id, d...))
	}
	got := cycleTexts(taskboard.Check(tasks))
	if len(got) != n {
		t.Fatalf("%d tasks on cycles, want %d", len(got), n)
	}
	for id, text := range got {
		names := strings.Split(text, " -> ")
		if names[0] != string(id) {
			t.Fatalf("%s's cycle %q does not start at it", id, text)
		}
		closed := names[len(names)-1] == string(id)
		if closed {
			names = names[:len(names)-1]
		} else if !strings.HasPrefix(names[len(names)-1], "... (") {
			t.Fatalf("%s's cycle %q neither closes nor says its length", id, text)
		} else {
			names = names[:len(names)-1]
		}
		seen := map[string]bool{}
		for i, name := range names {
			if seen[name] {
				t.Fatalf("%s's cycle %q repeats %s", id, text, name)
			}
			seen[name] = true
			if i+1 < len(names) || closed {
				next := names[(i+1)%len(names)]
				if !contains(deps[taskboard.TaskID(name)], taskboard.TaskID(next)) {
					t.Fatalf("%s's cycle %q: %s does not depend on %s", id, text, name, next)
				}
			}
		}
	}
}

func contains(ids []taskboard.TaskID, id taskboard.TaskID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestCheckQuotesOddNames: an id with a space reads quoted in a cycle, and texts stay
// bounded however long an owner is.
func TestCheckQuotesOddNames(t *testing.T) {
	got := cycleTexts(taskboard.Check([]taskboard.Task{open("my task", "b"), open("b", "my task")}))
	if got["b"] != `b -> "my task" -> b` {
		t.Fatalf("b's cycle %q", got["b"])
	}
	long := open("o")
	long.Owner = taskboard.AgentID(strings.Repeat("x", 500))
	problems := taskboard.Check([]taskboard.Task{long})
	if len(problems) != 1 || len(problems[0].Text) > 100 {
		t.Fatalf("a long owner: %v", problems)
	}
}

// TestStateTerminal: only done is terminal; failed work can be claimed again.
func TestStateTerminal(t *testing.T) {
	for state, want := range map[taskboard.State]bool{
		taskboard.StateOpen: false, taskboard.StateClaimed: false, taskboard.StateDone: true, taskboard.StateFailed: false,
	} {
		if state.Terminal() != want {
			t.Errorf("%s.Terminal() = %v", state, !want)
		}
	}
}
