// Package mcp is tent mcp: a Model Context Protocol server whose tools
// run commands and edit files inside tent sandboxes, so that an agent
// (Claude Code, Codex, Cursor, an agent framework) works in a sandbox
// instead of on the machine it runs on. It is built on the official Go
// SDK (github.com/modelcontextprotocol/go-sdk) over a [sandbox.Backend],
// as every tent frontend is; tent mcp uses the state directory's
// supervised backend, so tent ls, exec and rm see its sandboxes.
//
// # Who decides what
//
// Whoever starts the server decides what sandboxes may be:
// [Options.Spec] (tent mcp's flags, as tent create's) and the policy
// files of [Options.TemplatesDir] (as tent serve's templates). The model
// picks among those and never widens them: no tool takes a host path to
// mount, a network rule or a limit, and an argument asking for one is
// refused with the reason (see the tool descriptions). The model sees
// and acts on only the sandboxes this server made, and forks or restores
// only the snapshots it took (a snapshot carries its sandbox's spec).
//
// # Tools
//
// Sandboxes: sandbox_create, sandbox_list, sandbox_inspect, sandbox_kill;
// a default sandbox is made by the first tool call that needs one, so a
// session with one sandbox never calls sandbox_create. Commands: exec
// (an argv) and shell (sh -c), with cwd, env, stdin and a timeout,
// output bounded (the middle of a long output is cut and the result says
// so); progress notifications every second when the client sends a
// progress token; the client's cancellation kills the command.
// Background commands: process_start, process_read, process_write,
// process_kill, process_list; each is a process of its sandbox
// ([sandbox.Handle.Start]), named SANDBOX:PID, which outlives the
// session that started it. Files: file_read (line ranges), file_write,
// file_edit (exact replacement, failing when the string is absent or not
// unique), file_list (depth), file_find (glob), file_grep (RE2, line
// numbers), file_stat, file_mkdir, file_remove, file_move. Snapshots:
// snapshot_create, sandbox_fork, sandbox_restore. network_status: the
// policy in force and the destinations it refused lately.
//
// Every tool returns structured output (with its JSON schema) and a text
// rendering; failures are tool errors (isError) that say what to do,
// never protocol errors.
//
// # Where file tools act
//
// Every file tool is one operation of tent's file helper, which runs
// inside the sandbox with its view and restrictions
// ([sandbox.Handle.File]): "..", absolute paths and symlinks the
// sandbox planted resolve inside the sandbox, as a command there would
// see them, and never reach a host file the sandbox cannot. file_grep
// reads a tree as one tar stream made by the helper inside and treats it
// as hostile input: only regular files' bytes are searched, bounded.
//
// # Bounds
//
// At most [MaxSandboxes] sandboxes and [MaxProcesses] running background
// commands per server (their sandbox keeps 64 records and the last MiB
// of each one's output); 32 KiB of each output stream by default (1 MiB
// at most); 1 MiB of each background command's unread input; 256 KiB
// per file_read, 10 MiB per file written or edited, 1000 entries per listing, 200
// matches per grep by default (2000 at most; files over 4 MiB and binary
// files skipped, 64 MiB scanned); 64 recent denials per sandbox.
//
// # Background commands
//
// [sandbox.Backend] has no handle for a command that outlives a call,
// so this package keeps one: each background command is an Exec running
// in a goroutine of the server, its stdin fed from a bounded queue and
// its stdout and stderr (one stream, in the order written) kept in a
// bounded ring. They end with the server, or their sandbox.
//
// # Transports
//
// [Server.Run] serves one session on any transport of the SDK (tent mcp
// uses stdio). [Server.Handler] serves Streamable HTTP, every request
// carrying a bearer token compared in constant time; sessions share the
// server's sandboxes. [CheckListenAddr] refuses plain HTTP beyond
// loopback unless the caller insists; [LoadOrCreateToken] keeps the
// token in the state directory.
//
// # Network denials
//
// The Backend reports the destinations its limited network refused
// during each exec (sandbox.ExecResult.NetworkDenied); the server keeps
// the latest of those of its own commands per sandbox for
// network_status. Denials of commands started elsewhere (tent exec) are
// not seen.
package mcp
