package driver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// proto is a parsed C prototype.
type proto struct {
	ret, name string
	params    []param
}

type param struct{ typ, name string }

var protoRE = regexp.MustCompile(`^(.+?)\s*\b(\w+)\((.*)\)$`)

// parseProto splits "R name(T1 a, T2 b)" into its parts; "(void)" has no
// parameters.
func parseProto(t *testing.T, s string) proto {
	t.Helper()
	m := protoRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("cannot parse prototype %q", s)
	}
	p := proto{ret: m[1], name: m[2]}
	if m[3] == "void" || m[3] == "" {
		return p
	}
	for _, part := range strings.Split(m[3], ",") {
		part = strings.TrimSpace(part)
		i := strings.LastIndexAny(part, " *")
		if i < 0 {
			t.Fatalf("%s: parameter %q has no name", s, part)
		}
		p.params = append(p.params, param{typ: strings.TrimSpace(part[:i+1]), name: part[i+1:]})
	}
	return p
}

func TestSymbolTable(t *testing.T) {
	names, queries := map[string]bool{}, map[string]bool{}
	for i, s := range Symbols {
		if s.Name == "" {
			t.Errorf("Symbols[%d] is empty", i)
			continue
		}
		if names[s.Name] {
			t.Errorf("%s listed twice", s.Name)
		}
		names[s.Name] = true
		if s.Query != "" {
			if queries[s.Query] {
				t.Errorf("query %s listed twice", s.Query)
			}
			queries[s.Query] = true
			if s.Lib != LibCUDA {
				t.Errorf("%s: only driver symbols go through cuGetProcAddress", s.Name)
			}
			if strings.TrimSuffix(s.Name, "_v2") != s.Query {
				t.Errorf("%s: query %q is not its base name", s.Name, s.Query)
			}
		}
		if s.Args > 32 {
			t.Errorf("%s: %d arguments, purego passes at most 32", s.Name, s.Args)
		}
		p := parseProto(t, s.Proto)
		if p.name != s.Name {
			t.Errorf("%s: prototype declares %s", s.Name, p.name)
		}
		if len(p.params) != s.Args {
			t.Errorf("%s: Args = %d, prototype has %d parameters", s.Name, s.Args, len(p.params))
		}
		if s.Lib == LibCUDA && s.MinVersion > ABIVersion {
			t.Errorf("%s needs CUDA %d, newer than the ABI %d the loader requires", s.Name, s.MinVersion, ABIVersion)
		}
	}
	// The two symbols the loader needs before cuGetProcAddress works are
	// the only driver symbols found with dlsym.
	for _, s := range Symbols {
		if s.Lib == LibCUDA && s.Query == "" && s.Name != "cuGetProcAddress_v2" && s.Name != "cuDriverGetVersion" {
			t.Errorf("%s is dlsym'd: driver symbols must go through cuGetProcAddress", s.Name)
		}
	}
}

// TestWrapperCalls parses this package's sources and checks every
// binding.call: its first argument is a sym constant, the number of
// arguments after it is that symbol's Args, and every symbol is called
// somewhere.
func TestWrapperCalls(t *testing.T) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	symByName := map[string]sym{}
	for i := range numSyms {
		symByName[symName(i)] = i
	}
	called := map[sym]int{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "call" || len(call.Args) == 0 {
				return true
			}
			id, ok := call.Args[0].(*ast.Ident)
			if !ok {
				return true // binding.call itself forwards its sym variable
			}
			s, ok := symByName[id.Name]
			if !ok {
				t.Errorf("%s: call(%s, ...) is not a symbol", fset.Position(call.Pos()), id.Name)
				return true
			}
			if call.Ellipsis.IsValid() {
				t.Errorf("%s: call(%s, args...) hides its argument count", fset.Position(call.Pos()), id.Name)
			}
			if got := len(call.Args) - 1; got != Symbols[s].Args {
				t.Errorf("%s: %s called with %d arguments, its prototype has %d", fset.Position(call.Pos()), Symbols[s].Name, got, Symbols[s].Args)
			}
			called[s]++
			return true
		})
	}
	for i := range numSyms {
		if called[i] == 0 {
			t.Errorf("%s is in the table but no wrapper calls it", Symbols[i].Name)
		}
	}
}

// symName is the Go constant name of s: the symbol's base name.
func symName(s sym) string {
	if q := Symbols[s].Query; q != "" {
		return q
	}
	return strings.TrimSuffix(Symbols[s].Name, "_v2")
}
