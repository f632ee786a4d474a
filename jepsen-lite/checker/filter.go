package checker

import (
	"fmt"
	"strings"
)

// The subscription filter language (docs/topics.md), evaluated here
// independently of the server's implementation (fsm/filter.go), so that a
// copy the server delivers against its filter is caught rather than
// agreed with:
//
//	filter = term { "and" term }
//	term   = field ( "=" | "!=" | "^=" ) value | [ "not" ] "exists(" field ")"
//	field  = "type" | "group" | "attr." name
//	value  = bare word of [A-Za-z0-9._:/@+-] | "double-quoted" (\" and \\ escapes)
//
// An empty type or group counts as absent; != holds for an absent field.

// msgFields is what a filter reads of a publish.
type msgFields struct {
	typ, group string
	attrs      map[string]string
}

func (m msgFields) get(field string) (string, bool) {
	switch field {
	case "type":
		return m.typ, m.typ != ""
	case "group":
		return m.group, m.group != ""
	}
	v, ok := m.attrs[strings.TrimPrefix(field, "attr.")]
	return v, ok
}

// filterTerm is one condition: op is "=", "!=", "^=", "exists" or
// "missing".
type filterTerm struct {
	field, op, value string
}

// compiledFilter matches publishes; an empty one matches all.
type compiledFilter []filterTerm

func (f compiledFilter) match(m msgFields) bool {
	for _, t := range f {
		v, ok := m.get(t.field)
		var pass bool
		switch t.op {
		case "=":
			pass = ok && v == t.value
		case "!=":
			pass = !ok || v != t.value
		case "^=":
			pass = ok && strings.HasPrefix(v, t.value)
		case "exists":
			pass = ok
		case "missing":
			pass = !ok
		}
		if !pass {
			return false
		}
	}
	return true
}

// compileFilter parses expr.
func compileFilter(expr string) (compiledFilter, error) {
	toks, err := filterTokens(expr)
	if err != nil {
		return nil, err
	}
	var f compiledFilter
	for i := 0; i < len(toks); {
		if len(f) > 0 {
			if toks[i] != "and" {
				return nil, fmt.Errorf("filter %q: want and, got %q", expr, toks[i])
			}
			i++
		}
		rest := toks[i:]
		switch {
		case len(rest) >= 4 && rest[0] == "exists" && rest[1] == "(" && rest[3] == ")":
			f, i = append(f, filterTerm{field: rest[2], op: "exists"}), i+4
		case len(rest) >= 5 && rest[0] == "not" && rest[1] == "exists" && rest[2] == "(" && rest[4] == ")":
			f, i = append(f, filterTerm{field: rest[3], op: "missing"}), i+5
		case len(rest) >= 3 && (rest[1] == "=" || rest[1] == "!=" || rest[1] == "^="):
			f, i = append(f, filterTerm{field: rest[0], op: rest[1], value: unquote(rest[2])}), i+3
		default:
			return nil, fmt.Errorf("filter %q: cannot read a term at %q", expr, strings.Join(rest, " "))
		}
		t := f[len(f)-1]
		if t.field != "type" && t.field != "group" && (!strings.HasPrefix(t.field, "attr.") || len(t.field) == len("attr.")) {
			return nil, fmt.Errorf("filter %q: unknown field %q", expr, t.field)
		}
	}
	return f, nil
}

// filterTokens splits a filter into words, operators, parentheses and
// quoted strings; a quoted string keeps its quote (and its escapes
// resolved) so that it is never read as a keyword.
func filterTokens(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')' || c == '=':
			out = append(out, string(c))
			i++
		case (c == '!' || c == '^') && strings.HasPrefix(s[i+1:], "="):
			out = append(out, s[i:i+2])
			i += 2
		case c == '"':
			var b strings.Builder
			b.WriteByte('"')
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, fmt.Errorf("filter %q: unterminated string", s)
			}
			out = append(out, b.String())
			i = j + 1
		case strings.IndexByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/@+-", c) >= 0:
			j := i
			for j < len(s) && strings.IndexByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/@+-", s[j]) >= 0 {
				j++
			}
			out = append(out, s[i:j])
			i = j
		default:
			return nil, fmt.Errorf("filter %q: unexpected %q at byte %d", s, c, i)
		}
	}
	return out, nil
}

func unquote(tok string) string { return strings.TrimPrefix(tok, `"`) }
