package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/raftq/raftq/client"
)

// completionCommand prints a shell completion script. The script is made
// from the command table, so it completes exactly the commands and flags
// this binary has.
func completionCommand() command {
	return command{"completion", "bash|zsh", "print a shell completion script: source <(raftq completion bash)", func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			if err := exactly(pos, "SHELL"); err != nil {
				return nil, err
			}
			if pos[0] != "bash" && pos[0] != "zsh" {
				return nil, usagef("SHELL %q: want bash or zsh", pos[0])
			}
			return func(_ context.Context, _ *client.Client, o *output) error {
				return completionScript(o.w, pos[0])
			}, nil
		}
	}, true}
}

// completionScript writes the bash script, or for zsh the same function
// under zsh's bash compatibility (bashcompinit).
func completionScript(w io.Writer, shell string) error {
	var b strings.Builder
	if shell == "zsh" {
		b.WriteString("#compdef raftq\n# zsh completion for raftq: add `source <(raftq completion zsh)` to ~/.zshrc\n")
		b.WriteString("(( $+functions[compdef] )) || { autoload -U +X compinit && compinit; }\n")
		b.WriteString("autoload -U +X bashcompinit && bashcompinit\n")
	} else {
		b.WriteString("# bash completion for raftq: add `source <(raftq completion bash)` to ~/.bashrc\n")
	}
	top, groups, flags, valued := completionWords()
	fmt.Fprintf(&b, `_raftq() {
	local cur="${COMP_WORDS[COMP_CWORD]}" words=() skip=0 i w
	for ((i = 1; i < COMP_CWORD; i++)); do
		w="${COMP_WORDS[i]}"
		if ((skip)); then skip=0; continue; fi
		case "$w" in
		--*=*) ;;
		%s) skip=1 ;;
		-*) ;;
		*) words+=("$w") ;;
		esac
	done
	local cmd="${words[*]:0:2}"
	case "${words[0]}" in
	%s) ;;
	*) cmd="${words[0]}" ;;
	esac
	if ((${#words[@]} == 0)); then
		COMPREPLY=($(compgen -W %q -- "$cur"))
		return
	fi
	if [[ "$cur" == -* ]]; then
		case "$cmd" in
`, strings.Join(valued, "|"), strings.Join(sortedKeys(groups), "|"), strings.Join(top, " "))
	for _, path := range sortedKeys(flags) {
		fmt.Fprintf(&b, "\t\t%q) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", path, strings.Join(flags[path], " "))
	}
	b.WriteString("\t\tesac\n\t\treturn\n\tfi\n\tif ((${#words[@]} == 1)); then\n\t\tcase \"${words[0]}\" in\n")
	for _, g := range sortedKeys(groups) {
		fmt.Fprintf(&b, "\t\t%s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", g, strings.Join(groups[g], " "))
	}
	b.WriteString("\t\tcompletion) COMPREPLY=($(compgen -W \"bash zsh\" -- \"$cur\")) ;;\n")
	b.WriteString("\t\tesac\n\tfi\n}\ncomplete -F _raftq raftq\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// completionWords gathers from the command table: the first words, each
// group's second words, each command's flags (globals included) and the
// flags that take a value (whose next word is not a command word).
func completionWords() (top []string, groups, flags map[string][]string, valued []string) {
	groups, flags = map[string][]string{}, map[string][]string{}
	seenTop, seenValued := map[string]bool{"help": true}, map[string]bool{}
	top = []string{"help"}
	for _, c := range commands() {
		first, second, grouped := strings.Cut(c.path, " ")
		if !seenTop[first] {
			seenTop[first] = true
			top = append(top, first)
		}
		if grouped {
			groups[first] = append(groups[first], second)
		}
		fs := newFlagSet("raftq "+c.path, io.Discard)
		g := newGlobals(defaultAddr)
		g.register(fs)
		c.setup(&app{g: g}, fs)
		fs.VisitAll(func(f *flag.Flag) {
			flags[c.path] = append(flags[c.path], "--"+f.Name)
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); (!ok || !bf.IsBoolFlag()) && !seenValued[f.Name] {
				seenValued[f.Name] = true
				valued = append(valued, "--"+f.Name)
			}
		})
	}
	sort.Strings(valued)
	return top, groups, flags, valued
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
