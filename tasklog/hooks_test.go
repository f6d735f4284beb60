package tasklog

// What the external tests need of the package's insides.

// JournalAppenderEnv and JournalAppenderMain let TestMain run the test
// binary as a journal appender.
const JournalAppenderEnv = journalAppenderEnv

// JournalAppenderMain runs an appender; see journalAppenderMain.
var JournalAppenderMain = journalAppenderMain
