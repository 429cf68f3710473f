package taskboard

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The ten invariant codes of Check (SPEC 4), named as in the original Go package.
const (
	CodeEmptyID         = "empty_id"
	CodeDuplicateID     = "duplicate_id"
	CodeUnknownState    = "unknown_state"
	CodeUnknownDep      = "unknown_dep"
	CodeSelfDep         = "self_dep"
	CodeCycle           = "dep_cycle"
	CodeClaimedNoLease  = "claimed_without_lease"
	CodeLeaseNoClaim    = "lease_without_claim"
	CodeBlockedClaim    = "blocked_claim"
	CodeTerminalClaimed = "terminal_claimed"
)

// Problem is one invariant a snapshot violates.
type Problem struct {
	// Task is the task at fault.
	Task TaskID
	// Code is one of the ten Code constants, for machines.
	Code string
	// Text says what is wrong, for people.
	Text string
}

const (
	// shown is how many names a text lists before it is cut short, so texts stay bounded.
	shown = 8
	// bfsLimit: a dependency cycle component with fewer tasks, and at most this many tasks
	// plus edges, names a shortest cycle through each task (one breadth-first search each).
	bfsLimit   = 64
	cycleText  = "on a dependency cycle: "
	statesText = "open, claimed, done, failed"
)

func knownState(s State) bool {
	return s == StateOpen || s == StateClaimed || s == StateDone || s == StateFailed
}

// hasLease says whether a task carries a lease: a zero Lease is none.
func hasLease(l Lease) bool { return l.Token != "" || l.Fence != 0 || !l.Until.IsZero() }

// show quotes a value for a text, cut in the middle when it is long, so texts stay bounded.
func show(value string) string {
	quoted := []rune(strconv.Quote(value))
	if len(quoted) <= 60 {
		return string(quoted)
	}
	return string(quoted[:28]) + "..." + string(quoted[len(quoted)-29:])
}

// name is a task id as it reads in a text: bare when that is unambiguous, else quoted.
func name(id TaskID) string {
	s := string(id)
	if s == "" || utf8.RuneCountInString(s) > 60 || !utf8.ValidString(s) {
		return show(s)
	}
	for _, r := range s {
		if r == ' ' || !unicode.IsPrint(r) {
			return show(s)
		}
	}
	return s
}

// Check reports every invariant a snapshot of tasks violates (SPEC 4), sorted by task, code
// and text; nil for a healthy snapshot. It is a pure function: run it on a snapshot at any
// time (at start-up, every scheduling round), not only when something went wrong.
//
// The ten codes: an empty id; an id that occurs more than once; a state that is not one of
// the four; a dependency on no task in the snapshot (one problem per missing id); a task
// depending on itself; a task on a dependency cycle of two or more tasks (the text names a
// cycle through that task, read from it, "a -> b" meaning a depends on b: a shortest one
// where its component is small, and after eight names only the cycle's length); StateClaimed
// without an owner, a lease or a token; StateOpen or StateFailed with an owner or a lease;
// StateDone with an owner or a lease; StateClaimed while a known dependency (itself
// included) is not done (with duplicate ids, a dependency is done only if every entry is).
// An expired lease is not a problem. Duplicate entries of an id are one task: one problem
// per (task, code), except one CodeUnknownDep per missing id. A zero Lease is no lease.
func Check(tasks []Task) []Problem {
	var problems []Problem
	found := map[string]map[TaskID]string{} // code -> task -> its least text
	report := func(id TaskID, code, text string) {
		texts := found[code]
		if texts == nil {
			texts = map[TaskID]string{}
			found[code] = texts
		}
		if old, ok := texts[id]; !ok || text < old {
			texts[id] = text
		}
	}

	// Ids, and each id's dependencies: a duplicated id gets those of all its entries (one node).
	entries := map[TaskID]int{}
	depsOf := map[TaskID][]TaskID{}
	var ids []TaskID
	for _, t := range tasks {
		if entries[t.ID] == 0 {
			ids = append(ids, t.ID)
		}
		entries[t.ID]++
		depsOf[t.ID] = append(depsOf[t.ID], t.Deps...)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if n := entries[id]; n > 1 {
			problems = append(problems, Problem{id, CodeDuplicateID, fmt.Sprintf("id occurs %d times", n)})
		}
	}
	if entries[""] > 0 {
		problems = append(problems, Problem{"", CodeEmptyID, "id is empty"})
	}

	// Dependencies: unknown ones and self loops.
	for _, id := range ids {
		missing := map[TaskID]bool{}
		for _, dep := range depsOf[id] {
			if entries[dep] == 0 && !missing[dep] {
				missing[dep] = true
				// Quoted whole, never cut short: two unknown ids of one task always differ.
				text := "depends on unknown task " + strconv.Quote(string(dep))
				problems = append(problems, Problem{id, CodeUnknownDep, text})
			}
			if dep == id {
				report(id, CodeSelfDep, "depends on itself")
			}
		}
	}

	// States and holders.
	notDone := map[TaskID]bool{} // ids with an entry that is not done (unknown states included)
	for _, t := range tasks {
		if !knownState(t.State) {
			report(t.ID, CodeUnknownState, fmt.Sprintf("state %s is not one of %s", show(string(t.State)), statesText))
		}
		if t.State != StateDone {
			notDone[t.ID] = true
		}
	}
	for _, t := range tasks {
		leased := hasLease(t.Lease)
		switch {
		case t.State == StateClaimed:
			var lacks []string
			if t.Owner == "" {
				lacks = append(lacks, "owner")
			}
			if !leased {
				lacks = append(lacks, "lease")
			} else if t.Lease.Token == "" {
				lacks = append(lacks, "lease token")
			}
			if lacks != nil {
				report(t.ID, CodeClaimedNoLease, "claimed without "+strings.Join(lacks, " or "))
			}
			if text := blockingText(t.Deps, notDone); text != "" {
				report(t.ID, CodeBlockedClaim, text)
			}
		case knownState(t.State) && (t.Owner != "" || leased):
			var held []string
			if t.Owner != "" {
				held = append(held, "owner "+show(string(t.Owner)))
			}
			if leased {
				held = append(held, "a lease")
			}
			if t.State == StateDone {
				report(t.ID, CodeTerminalClaimed, "done but still has "+strings.Join(held, " and "))
			} else {
				report(t.ID, CodeLeaseNoClaim, fmt.Sprintf("%s but has %s", t.State, strings.Join(held, " and ")))
			}
		}
	}

	problems = append(problems, cycleProblems(ids, depsOf, entries)...)
	for code, texts := range found {
		for id, text := range texts {
			problems = append(problems, Problem{id, code, text})
		}
	}
	sort.Slice(problems, func(i, j int) bool {
		a, b := problems[i], problems[j]
		if a.Task != b.Task {
			return a.Task < b.Task
		}
		if a.Code != b.Code {
			return a.Code < b.Code
		}
		return a.Text < b.Text
	})
	return problems
}

// blockingText is the CodeBlockedClaim text for a claimed task with these dependencies, or
// "" when every known one is done.
func blockingText(deps []TaskID, notDone map[TaskID]bool) string {
	set := map[TaskID]bool{}
	var blocking []TaskID
	for _, dep := range deps {
		if notDone[dep] && !set[dep] {
			set[dep] = true
			blocking = append(blocking, dep)
		}
	}
	if blocking == nil {
		return ""
	}
	sort.Slice(blocking, func(i, j int) bool { return blocking[i] < blocking[j] })
	var names []string
	for _, dep := range blocking {
		if len(names) == shown {
			break
		}
		names = append(names, name(dep))
	}
	listed := strings.Join(names, ", ")
	if len(blocking) > shown {
		listed += fmt.Sprintf(", ... (%d in all)", len(blocking))
	}
	which := "dependencies"
	if len(blocking) == 1 {
		which = "dependency"
	}
	return fmt.Sprintf("claimed while %s not done: %s", which, listed)
}

// cycleWords lists the first names of a cycle of length tasks, cut short after shown.
func cycleWords(first []string, length int) string {
	if length <= shown {
		return strings.Join(append(first[:length:length], first[0]), " -> ")
	}
	return strings.Join(first[:shown], " -> ") + fmt.Sprintf(" -> ... (%d tasks)", length)
}

// cycleProblems gives one CodeCycle problem to each task on a dependency cycle of two or
// more tasks (ids sorted, each once), naming a cycle through that very task. The texts
// depend on the graph alone, not on the input's order.
func cycleProblems(ids []TaskID, depsOf map[TaskID][]TaskID, entries map[TaskID]int) []Problem {
	number := make(map[TaskID]int, len(ids))
	for at, id := range ids {
		number[id] = at
	}
	// Each task's known dependencies, once each, in id order, without self loops.
	succ := make([][]int, len(ids))
	for at, id := range ids {
		seen := map[int]bool{}
		for _, dep := range depsOf[id] {
			if to, ok := number[dep]; ok && to != at && !seen[to] {
				seen[to] = true
				succ[at] = append(succ[at], to)
			}
		}
		sort.Ints(succ[at])
	}
	names := make([]string, len(ids))
	for at, id := range ids {
		names[at] = name(id)
	}
	var problems []Problem
	for _, members := range components(succ) {
		for task, text := range componentCycles(members, succ, names) {
			problems = append(problems, Problem{ids[task], CodeCycle, cycleText + text})
		}
	}
	return problems
}

// components are the strongly connected components of two or more tasks (Tarjan's).
func components(succ [][]int) [][]int {
	index := make([]int, len(succ))
	low := make([]int, len(succ))
	onStack := make([]bool, len(succ))
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var found [][]int
	next := 0
	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range succ[v] {
			if index[w] < 0 {
				visit(w)
				if low[w] < low[v] {
					low[v] = low[w]
				}
			} else if onStack[w] && index[w] < low[v] {
				low[v] = index[w]
			}
		}
		if low[v] != index[v] {
			return
		}
		at := len(stack) - 1
		for stack[at] != v {
			at--
		}
		members := append([]int(nil), stack[at:]...)
		for _, w := range members {
			onStack[w] = false
		}
		stack = stack[:at]
		if len(members) > 1 {
			found = append(found, members)
		}
	}
	for v := range succ {
		if index[v] < 0 {
			visit(v)
		}
	}
	return found
}

// componentCycles names a cycle through each task of one component: a shortest one where
// the component is small, the ring read from the task where it is one ring, else the way
// from the task toward the component's first task and back down to the task.
func componentCycles(members []int, succ [][]int, names []string) map[int]string {
	inside := map[int]bool{}
	for _, v := range members {
		inside[v] = true
	}
	within := map[int][]int{}
	edges := 0
	ring := true
	for _, v := range members {
		for _, w := range succ[v] {
			if inside[w] {
				within[v] = append(within[v], w)
			}
		}
		edges += len(within[v])
		ring = ring && len(within[v]) == 1
	}
	texts := make(map[int]string, len(members))
	words := func(cycle []int) string {
		first := make([]string, 0, shown)
		for _, v := range cycle {
			if len(first) == shown {
				break
			}
			first = append(first, names[v])
		}
		return cycleWords(first, len(cycle))
	}
	switch {
	case len(members) < bfsLimit && len(members)+edges <= bfsLimit:
		for _, v := range members {
			texts[v] = words(shortestCycle(v, within))
		}
	case ring:
		for _, v := range members {
			first := []int{v}
			for w := within[v][0]; w != v && len(first) < shown; w = within[w][0] {
				first = append(first, w)
			}
			texts[v] = wordsOf(first, len(members), names)
		}
	default:
		for v, text := range throughRoot(members, within, names) {
			texts[v] = text
		}
	}
	return texts
}

// wordsOf is cycleWords over task numbers.
func wordsOf(first []int, length int, names []string) string {
	listed := make([]string, len(first))
	for i, v := range first {
		listed[i] = names[v]
	}
	return cycleWords(listed, length)
}

// shortestCycle is a shortest cycle through start, by breadth-first search over within
// (dependencies in id order), listed from start.
func shortestCycle(start int, within map[int][]int) []int {
	parent := map[int]int{start: start}
	queue := []int{start}
	for len(queue) > 0 {
		node := queue[0]
		queue = queue[1:]
		for _, dep := range within[node] {
			if dep == start {
				path := []int{node}
				for path[len(path)-1] != start {
					path = append(path, parent[path[len(path)-1]])
				}
				for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
					path[i], path[j] = path[j], path[i]
				}
				return path
			}
			if _, seen := parent[dep]; !seen {
				parent[dep] = node
				queue = append(queue, dep)
			}
		}
	}
	panic("taskboard: no cycle through a task of a strongly connected component")
}

// throughRoot names a cycle through each task of a large component. From the component's
// first task r, two breadth-first searches give each task v a shortest way to r and one
// from r down to v. v's cycle follows its way toward r up to the first task x on r's way
// down to v, then goes down from x to v: the two parts share no task but v, so the cycle
// is simple.
func throughRoot(members []int, within map[int][]int, names []string) map[int]string {
	root := members[0]
	for _, v := range members {
		if v < root {
			root = v
		}
	}
	toward := map[int]int{} // v -> the dependency of v on a shortest way to root
	depending := map[int][]int{}
	for _, v := range members {
		for _, w := range within[v] {
			depending[w] = append(depending[w], v)
		}
	}
	queue := []int{root}
	for len(queue) > 0 {
		w := queue[0]
		queue = queue[1:]
		for _, v := range depending[w] {
			if _, seen := toward[v]; !seen && v != root {
				toward[v] = w
				queue = append(queue, v)
			}
		}
	}
	// The tree of shortest ways down from root, with each task's depth and its interval in a
	// preorder walk (a is above v iff v's interval lies in a's).
	parent := map[int]int{root: root}
	depth := map[int]int{root: 0}
	children := map[int][]int{}
	queue = []int{root}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range within[v] {
			if _, seen := parent[w]; !seen {
				parent[w], depth[w] = v, depth[v]+1
				children[v] = append(children[v], w)
				queue = append(queue, w)
			}
		}
	}
	enter, leave := map[int]int{}, map[int]int{}
	clock := 0
	walk := []int{root}
	for len(walk) > 0 {
		v := walk[len(walk)-1]
		if _, entered := enter[v]; !entered {
			enter[v] = clock
			clock++
			walk = append(walk, children[v]...)
			continue
		}
		walk = walk[:len(walk)-1]
		leave[v] = clock
	}
	above := func(a, v int) bool { return enter[a] <= enter[v] && leave[v] <= leave[a] }

	texts := map[int]string{}
	for _, v := range members {
		if v == root {
			cycle := shortestCycle(v, within)
			texts[v] = wordsOf(truncate(cycle), len(cycle), names)
			continue
		}
		first := []int{v}
		steps := 0
		x := v
		for {
			x = toward[x]
			steps++
			if above(x, v) {
				break
			}
			if len(first) < shown {
				first = append(first, x)
			}
		}
		length := steps + depth[v] - depth[x]
		if len(first) < shown {
			// Then down from x to v: the tree's way, read upward from v and turned round.
			var down []int
			for w := v; w != x; w = parent[w] {
				down = append(down, w)
			}
			down = append(down, x)
			for i := len(down) - 1; i > 0 && len(first) < shown; i-- {
				first = append(first, down[i])
			}
		}
		texts[v] = wordsOf(first, length, names)
	}
	return texts
}

// truncate keeps the first names a text lists.
func truncate(cycle []int) []int {
	if len(cycle) > shown {
		return cycle[:shown]
	}
	return cycle
}
