package layer

import (
	"strings"
	"unicode/utf8"
)

// gitQuote returns prefix+name as git writes a path in a patch header
// (quote.c, quote_c_style with core.quotePath=true): unchanged unless a
// byte needs quoting, else in double quotes with C escapes (\a \b \t \n
// \v \f \r \" \\) and every other control byte, DEL and byte >= 0x80 as
// three octal digits. Spaces are not quoted, except that a name ending in
// a space is quoted whole (git does not, but patch(1) drops trailing
// blanks from an unquoted name; git apply reads either). The result
// never contains a control byte or a non-ASCII byte, so a sandbox's file
// name can neither forge a patch line nor reach a terminal as an escape
// sequence.
func gitQuote(prefix, name string) string {
	if !needsQuote(prefix) && !needsQuote(name) && !strings.HasSuffix(name, " ") {
		return prefix + name
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, s := range []string{prefix, name} {
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch c {
			case '\a':
				b.WriteString(`\a`)
			case '\b':
				b.WriteString(`\b`)
			case '\t':
				b.WriteString(`\t`)
			case '\n':
				b.WriteString(`\n`)
			case '\v':
				b.WriteString(`\v`)
			case '\f':
				b.WriteString(`\f`)
			case '\r':
				b.WriteString(`\r`)
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			default:
				if c < 0x20 || c >= 0x7f {
					b.WriteByte('\\')
					b.WriteByte('0' + c>>6)
					b.WriteByte('0' + c>>3&7)
					b.WriteByte('0' + c&7)
				} else {
					b.WriteByte(c)
				}
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

func needsQuote(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return true
		}
	}
	return false
}

// isSafeText reports whether b can be printed as patch lines: valid UTF-8
// without NUL, without C0 controls other than tab, form feed and a
// carriage return right before a newline, and without DEL or C1
// controls (U+0080..U+009F). Anything else (binary data, and text that
// carries terminal escape sequences, backspaces or bare carriage
// returns, which could hide lines from a reader) is written as a git
// binary literal, so the printed patch is inert on a terminal.
func isSafeText(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\n' || c == '\t' || c == '\f':
			case c == '\r':
				if i+1 >= len(b) || b[i+1] != '\n' {
					return false
				}
			case c < 0x20 || c == 0x7f:
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 || r >= 0x80 && r <= 0x9f {
			return false
		}
		i += n
	}
	return true
}

// QuoteName returns a path as tent prints a name a sandbox chose (tent
// diff, messages): unchanged when it is printable ASCII, else quoted as
// in a patch header (see gitQuote), so that it can neither forge an
// output line nor reach a terminal as an escape sequence.
func QuoteName(name string) string { return gitQuote("", name) }
