package tasklog

// What the external tests need of the package's insides.

// JournalAppenderEnv and JournalAppenderMain let TestMain run the test
// binary as a journal appender.
const JournalAppenderEnv = journalAppenderEnv

// JournalAppenderMain runs an appender; see journalAppenderMain.
var JournalAppenderMain = journalAppenderMain

// SetJournalFaults makes the local journal's writes go through fault
// (nil: the real write), for tests of failing disks.
func SetJournalFaults(l *Log, fault func(b []byte) (int, error)) {
	l.fj.qmu.Lock()
	defer l.fj.qmu.Unlock()
	if fault == nil {
		l.fj.faults = nil
		return
	}
	l.fj.faults = func(_ uint32, b []byte) (int, error) { return fault(b) }
}

// StartTaskOwnedBy starts a task as if process owner ("host/pid/start")
// had started it.
func StartTaskOwnedBy(l *Log, id, owner string, at int64) error {
	_, err := l.appendRecs(bg, &jrec{Type: recStart, Task: id, At: at, Owner: owner, Start: &jStart{Created: at}})
	return err
}

// NoBackgroundRetention leaves retention to EnforceRetention, so that a
// test knows what each pass drops.
func NoBackgroundRetention() Option { return func(o *options) { o.noBackgroundRetention = true } }
