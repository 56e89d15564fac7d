package install

// FakeCall is one call: Kind is connect, run, query or close; Name the
// phase or what the query is.
type FakeCall struct {
	Host, Kind, Name string
	Attached         bool
	Err              string
}

// Calls are the calls so far, in order.
func (f *Fake) Calls() []FakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FakeCall(nil), f.calls...)
}

// Runs is how many times phase's script ran on host (an attach is not a
// run).
func (f *Fake) Runs(host, phase string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[host+"/"+phase]
}

// Script is the last script job ran on host ("" when none ran).
func (f *Fake) Script(host, job string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scripts[host+"/"+job]
}

func (f *Fake) record(c FakeCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}
