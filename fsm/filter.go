package fsm

import (
	"fmt"
	"strings"
)

// Subscription filters (docs/topics.md, "Filters"). A filter is evaluated
// by every replica at publish, so it must be a pure function of the
// message: no time, no randomness, no locale. The language is small on
// purpose: equality, inequality, prefix and presence of the message's type,
// group or an attribute, joined by "and".
//
//	filter = term { "and" term }
//	term   = field ( "=" | "!=" | "^=" ) value | [ "not" ] "exists(" field ")"
//	field  = "type" | "group" | "attr." name
//	value  = bare word of [A-Za-z0-9._:/@+-] | "double-quoted" (\" and \\ escapes)

// Filter limits.
const (
	MaxFilterLen   = 1024
	MaxFilterTerms = 16
)

type filterOp uint8

const (
	opEq filterOp = iota
	opNe
	opPrefix
	opExists
	opMissing
)

type fieldKind uint8

const (
	fieldType fieldKind = iota
	fieldGroup
	fieldAttr
)

type filterTerm struct {
	kind  fieldKind
	attr  string // fieldAttr: the attribute's name
	op    filterOp
	value string
}

// filter is a parsed subscription filter; nil matches everything.
type filter struct{ terms []filterTerm }

// ValidateFilter checks a filter expression as ParseFilter does.
func ValidateFilter(expr string) error {
	_, err := parseFilter(expr)
	return err
}

func parseFilter(expr string) (*filter, error) {
	if len(expr) > MaxFilterLen {
		return nil, fmt.Errorf("%w: filter is %d bytes, limit %d", ErrInvalidArgument, len(expr), MaxFilterLen)
	}
	toks, err := lexFilter(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: filter %q: %v", ErrInvalidArgument, expr, err)
	}
	if len(toks) == 0 {
		return nil, nil
	}
	f := &filter{}
	p := &filterParser{toks: toks}
	for {
		t, err := p.term()
		if err != nil {
			return nil, fmt.Errorf("%w: filter %q: %v", ErrInvalidArgument, expr, err)
		}
		f.terms = append(f.terms, t)
		if len(f.terms) > MaxFilterTerms {
			return nil, fmt.Errorf("%w: filter %q has more than %d terms", ErrInvalidArgument, expr, MaxFilterTerms)
		}
		if p.done() {
			return f, nil
		}
		if tok := p.next(); tok.kind != tokWord || tok.text != "and" {
			return nil, fmt.Errorf("%w: filter %q: want \"and\" between terms, got %s", ErrInvalidArgument, expr, tok)
		}
	}
}

// match reports whether a message with this type, group and attributes
// (sorted by key) passes every term.
func (f *filter) match(typ, group string, attrs []kv) bool {
	if f == nil {
		return true
	}
	for _, t := range f.terms {
		v, ok := "", false
		switch t.kind {
		case fieldType:
			v, ok = typ, typ != ""
		case fieldGroup:
			v, ok = group, group != ""
		case fieldAttr:
			v, ok = attrValue(attrs, t.attr)
		}
		var pass bool
		switch t.op {
		case opEq:
			pass = ok && v == t.value
		case opNe:
			pass = !ok || v != t.value
		case opPrefix:
			pass = ok && strings.HasPrefix(v, t.value)
		case opExists:
			pass = ok
		case opMissing:
			pass = !ok
		}
		if !pass {
			return false
		}
	}
	return true
}

func attrValue(attrs []kv, k string) (string, bool) {
	for _, a := range attrs {
		if a.k == k {
			return a.v, true
		}
	}
	return "", false
}

type tokKind uint8

const (
	tokWord tokKind = iota
	tokString
	tokOp // = != ^=
	tokLParen
	tokRParen
	tokEnd
)

type ftoken struct {
	kind tokKind
	text string
}

func (t ftoken) String() string {
	switch t.kind {
	case tokString:
		return fmt.Sprintf("string %q", t.text)
	case tokEnd:
		return t.text
	}
	return fmt.Sprintf("%q", t.text)
}

func wordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("._:/@+-", c) >= 0
}

func lexFilter(s string) ([]ftoken, error) {
	var out []ftoken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(':
			out = append(out, ftoken{tokLParen, "("})
			i++
		case c == ')':
			out = append(out, ftoken{tokRParen, ")"})
			i++
		case c == '=':
			out = append(out, ftoken{tokOp, "="})
			i++
		case (c == '!' || c == '^') && i+1 < len(s) && s[i+1] == '=':
			out = append(out, ftoken{tokOp, s[i : i+2]})
			i += 2
		case c == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					if j+1 >= len(s) || (s[j+1] != '"' && s[j+1] != '\\') {
						return nil, fmt.Errorf("at byte %d: only \\\" and \\\\ may be escaped", j)
					}
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("at byte %d: unterminated string", i)
			}
			out = append(out, ftoken{tokString, b.String()})
			i = j + 1
		case wordChar(c):
			j := i
			for j < len(s) && wordChar(s[j]) {
				j++
			}
			out = append(out, ftoken{tokWord, s[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("at byte %d: unexpected %q", i, c)
		}
	}
	return out, nil
}

type filterParser struct {
	toks []ftoken
	i    int
}

func (p *filterParser) done() bool { return p.i >= len(p.toks) }

func (p *filterParser) next() ftoken {
	if p.done() {
		return ftoken{tokEnd, "end of filter"}
	}
	t := p.toks[p.i]
	p.i++
	return t
}

func (p *filterParser) term() (filterTerm, error) {
	t := p.next()
	if t.kind != tokWord {
		return filterTerm{}, fmt.Errorf("want a field, not or exists(, got %s", t)
	}
	switch t.text {
	case "not":
		if w := p.next(); w.kind != tokWord || w.text != "exists" {
			return filterTerm{}, fmt.Errorf("want exists( after not, got %s", w)
		}
		return p.exists(opMissing)
	case "exists":
		return p.exists(opExists)
	}
	ft, err := parseField(t.text)
	if err != nil {
		return filterTerm{}, err
	}
	op := p.next()
	if op.kind != tokOp {
		return filterTerm{}, fmt.Errorf("want =, != or ^= after %s, got %s", t.text, op)
	}
	v := p.next()
	if v.kind != tokWord && v.kind != tokString {
		return filterTerm{}, fmt.Errorf("want a value after %s %s, got %s", t.text, op.text, v)
	}
	ft.value = v.text
	switch op.text {
	case "=":
		ft.op = opEq
	case "!=":
		ft.op = opNe
	default:
		ft.op = opPrefix
	}
	return ft, nil
}

func (p *filterParser) exists(op filterOp) (filterTerm, error) {
	if t := p.next(); t.kind != tokLParen {
		return filterTerm{}, fmt.Errorf("want ( after exists, got %s", t)
	}
	f := p.next()
	if f.kind != tokWord {
		return filterTerm{}, fmt.Errorf("want a field in exists(), got %s", f)
	}
	ft, err := parseField(f.text)
	if err != nil {
		return filterTerm{}, err
	}
	if t := p.next(); t.kind != tokRParen {
		return filterTerm{}, fmt.Errorf("want ) after exists(%s, got %s", f.text, t)
	}
	ft.op = op
	return ft, nil
}

func parseField(s string) (filterTerm, error) {
	switch {
	case s == "type":
		return filterTerm{kind: fieldType}, nil
	case s == "group":
		return filterTerm{kind: fieldGroup}, nil
	case strings.HasPrefix(s, "attr.") && len(s) > len("attr."):
		return filterTerm{kind: fieldAttr, attr: s[len("attr."):]}, nil
	}
	return filterTerm{}, fmt.Errorf("unknown field %q: use type, group or attr.NAME", s)
}
