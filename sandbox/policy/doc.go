// Package policy reads sandbox settings written as text: the tent CLI's
// policy files and the textual forms of its flags. It turns them into a
// [sandbox.Spec]; the sandbox package itself only takes a Spec, so a
// program that builds its Spec in Go links neither this package nor its
// YAML decoder.
//
// # Policy files
//
// A policy file (tent run --policy FILE) is a YAML or JSON document with
// the settings of `tent run`'s flags; [Policy] lists its keys. [Load]
// reads a file, choosing the format by extension (.json, .yaml, .yml) or,
// for any other name, by content; [Parse] decodes a document already in
// memory. Both check syntax and key names only: unknown keys are errors.
// [Policy.Apply] then checks every value and sets it on a Spec, resolving
// relative host paths against the file's directory. Every key is
// optional, an unset key leaves the Spec alone, and the CLI applies its
// flags after the file, so flags win.
//
// # Templates
//
// A template is a policy file in a templates directory, named NAME.json,
// NAME.yaml or NAME.yml: tent serve's templates and tent mcp's.
// [LoadTemplate] finds one by name (a [ValidName], never a path) and
// [TemplateNames] lists a directory's. A template (as any policy file)
// may name a service, the command its sandboxes keep running with a
// readiness check ([Service], sandbox.Service): package supervised starts
// it in every incarnation of the sandbox.
//
// # One parser per textual form
//
// Flags and files share the parsers: --memory and a policy's memory both
// go through [ParseSize], --user and user through [ParseUser], --ro/--rw
// and ro/rw through [ParseMount], and so on for durations ([ParseDuration]),
// environment entries and files ([ParseEnv], [ParseEnvFile],
// [ReadEnvFile]), network modes ([ParseNet]), seccomp profiles
// ([LoadSeccomp]) and tiers ([ParseTier]). A value is therefore spelled
// the same way in both places and refused with the same reason.
//
// The byte-count syntax (256M, 1G) is defined by package cgroups, which
// owns memory limits: [ParseSize] and [FormatSize] are that package's
// functions, so that the sandbox package can print a memory limit in its
// error messages without importing this package.
//
// # Network terms for frontends
//
// A frontend that builds a network policy from its own protocol (E2B's
// network settings, MCP's denials) names its terms here, not in package
// netpolicy: the modes ([NetNone], [NetLimited], [NetHost]), host rules
// ([ParseRule]), a whole policy's check ([CheckNetwork]), a credential
// ([NetworkSecret]) and its templates ([SecretRef], [FillSecretTemplate]),
// and refused connections ([Denial], [DeniedSummary]).
//
// # Errors
//
// The parsers' errors say what is wrong with a value without repeating
// it; the caller names the flag or key and quotes the value. The CLI
// writes `--memory "-1": size is negative: ...`; [Policy.Apply] and
// [Load] return an [*Error] whose Where is the key (such as "memory",
// "mounts[1].access" or "env_file[0]") or, for read and syntax errors,
// the file, as in `policy memory: "-1": size is negative: ...`. YAML
// syntax and type errors also give the line. An [*Error] matches
// sandbox.ErrInvalidSpec with errors.Is and wraps its cause (so a missing
// file matches os.ErrNotExist too).
package policy
