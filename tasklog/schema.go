package tasklog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// migration is one step of the schema's history: the SQL that takes a
// database from version-1 to version. Steps are never edited once released;
// a change is a new step at the end.
type migration struct {
	version int
	sql     []string
	// foreignKeysOff runs the step with foreign keys off (a table
	// rebuilt), checking them before it commits.
	foreignKeysOff bool
}

// migrations is the schema's history, oldest first. Each step runs in its
// own transaction, together with the update of schema_version, so a crash
// during a migration leaves the file at the previous version.
var migrations = []migration{
	{version: 1, sql: []string{
		`CREATE TABLE tasks (
			id           TEXT PRIMARY KEY,
			status       TEXT NOT NULL CHECK (status IN ('running','success','failed','cancelled','interrupted')),
			created_at   INTEGER NOT NULL,
			updated_at   INTEGER NOT NULL,
			ended_at     INTEGER,
			input        TEXT NOT NULL DEFAULT '',
			final_answer TEXT NOT NULL DEFAULT '',
			metadata     TEXT NOT NULL DEFAULT '{}'
		)`,
		`CREATE INDEX tasks_created ON tasks (created_at, id)`,
		`CREATE INDEX tasks_status ON tasks (status, created_at, id)`,
		`CREATE TABLE steps (
			seq      INTEGER PRIMARY KEY AUTOINCREMENT,
			task_id  TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
			name     TEXT NOT NULL,
			message  TEXT NOT NULL DEFAULT '',
			level    TEXT NOT NULL CHECK (level IN ('debug','info','warning','error')),
			time     INTEGER NOT NULL,
			metadata TEXT
		)`,
		`CREATE INDEX steps_task ON steps (task_id, seq)`,
		`CREATE TABLE messages (
			seq          INTEGER PRIMARY KEY AUTOINCREMENT,
			task_id      TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
			session      TEXT NOT NULL,
			role         TEXT NOT NULL,
			content      TEXT NOT NULL,
			name         TEXT NOT NULL DEFAULT '',
			tool_call_id TEXT NOT NULL DEFAULT '',
			time         INTEGER NOT NULL
		)`,
		`CREATE INDEX messages_task ON messages (task_id, session, seq)`,
		`CREATE TABLE calls (
			id          TEXT PRIMARY KEY,
			task_id     TEXT REFERENCES tasks (id) ON DELETE CASCADE,
			session     TEXT NOT NULL DEFAULT '',
			server      TEXT NOT NULL,
			tool        TEXT NOT NULL,
			error_kind  TEXT NOT NULL DEFAULT '',
			started_at  INTEGER NOT NULL,
			ended_at    INTEGER NOT NULL,
			duration_ns INTEGER NOT NULL,
			record      TEXT NOT NULL
		)`,
		`CREATE INDEX calls_task ON calls (task_id, started_at)`,
	}},
	{version: 2, sql: []string{
		// OpenAI-style assistant messages carry their tool calls beside the
		// content; without them a history cannot be replayed.
		`ALTER TABLE messages ADD COLUMN tool_calls TEXT`,
		// Stream events, kept so a reconnecting client resumes from its
		// Last-Event-ID. Ids are the stream hub's, not SQLite's.
		`CREATE TABLE events (
			id   INTEGER PRIMARY KEY,
			name TEXT NOT NULL,
			task TEXT NOT NULL DEFAULT '',
			time INTEGER NOT NULL,
			data TEXT
		)`,
		`CREATE INDEX events_task ON events (task, id)`,
	}},
	{version: 3, foreignKeysOff: true, sql: []string{
		// Gateway sessions end as closed, idle or shutdown; every task
		// records the process that runs it (owner), so a task whose
		// process died can be told from one another process still runs.
		// SQLite cannot change a CHECK constraint in place: the table is
		// rebuilt (foreign keys off, so dropping the old table does not
		// cascade into steps, messages and calls).
		`CREATE TABLE tasks_v3 (
			id           TEXT PRIMARY KEY,
			status       TEXT NOT NULL CHECK (status IN ('running','success','failed','cancelled','interrupted','closed','idle','shutdown')),
			created_at   INTEGER NOT NULL,
			updated_at   INTEGER NOT NULL,
			ended_at     INTEGER,
			input        TEXT NOT NULL DEFAULT '',
			final_answer TEXT NOT NULL DEFAULT '',
			metadata     TEXT NOT NULL DEFAULT '{}',
			owner        TEXT NOT NULL DEFAULT ''
		)`,
		`INSERT INTO tasks_v3 (id, status, created_at, updated_at, ended_at, input, final_answer, metadata)
			SELECT id, status, created_at, updated_at, ended_at, input, final_answer, metadata FROM tasks`,
		`DROP TABLE tasks`,
		`ALTER TABLE tasks_v3 RENAME TO tasks`,
		`CREATE INDEX tasks_created ON tasks (created_at, id)`,
		`CREATE INDEX tasks_status ON tasks (status, created_at, id)`,
	}},
}

// SchemaVersion is the newest schema version this package knows: the
// version of the last migration.
const SchemaVersion = 3

// migrate brings the database to SchemaVersion, one step per transaction.
// Several processes may open a new file at once: each step re-reads the
// version under the write lock, so a step runs exactly once.
func (l *Log) migrate(ctx context.Context) error {
	err := l.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("tasklog: opening %s: %w", l.path, err)
	}
	for _, m := range migrations {
		if m.foreignKeysOff {
			// A pragma a transaction cannot change: set on the writer's
			// one connection, between transactions.
			if _, err := l.w.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
				return fmt.Errorf("tasklog: migrating %s: %w", l.path, err)
			}
		}
		err := l.write(ctx, func(tx *sql.Tx) error {
			v, err := schemaVersion(ctx, tx)
			switch {
			case err != nil:
				return err
			case v > SchemaVersion:
				return &VersionError{Path: l.path, Found: v, Supported: SchemaVersion}
			case v >= m.version:
				return nil
			case v != m.version-1:
				return fmt.Errorf("schema version %d cannot be migrated by step %d", v, m.version)
			}
			for _, stmt := range m.sql {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("migration to version %d: %w", m.version, err)
				}
			}
			if m.foreignKeysOff {
				rows, err := tx.QueryContext(ctx, `PRAGMA foreign_key_check`)
				if err != nil {
					return err
				}
				bad := rows.Next()
				rows.Close()
				if bad {
					return fmt.Errorf("migration to version %d broke a foreign key", m.version)
				}
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM schema_version`); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (?)`, m.version)
			return err
		})
		if m.foreignKeysOff {
			if _, ferr := l.w.ExecContext(ctx, `PRAGMA foreign_keys = ON`); ferr != nil && err == nil {
				err = ferr
			}
		}
		if err != nil {
			var ve *VersionError
			if errors.As(err, &ve) {
				return ve
			}
			return fmt.Errorf("tasklog: migrating %s: %w", l.path, err)
		}
	}
	return nil
}

// schemaVersion reads the version; an empty table is version 0.
func schemaVersion(ctx context.Context, tx *sql.Tx) (int, error) {
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(version) FROM schema_version`).Scan(&v); err != nil {
		return 0, err
	}
	return int(v.Int64), nil
}

// Version returns the schema version of the open database.
func (l *Log) Version(ctx context.Context) (int, error) {
	var v int
	err := l.read(ctx, func(tx *sql.Tx) error {
		var err error
		v, err = schemaVersion(ctx, tx)
		return err
	})
	return v, err
}
