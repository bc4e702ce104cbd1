package data

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// Parquet files are read row by row and each row is assembled into the same
// values JSON gives (map[string]any for a struct, []any for a list), so one
// set of format rules serves both. The assembly is Dremel's: every leaf
// column carries, for each value, a definition level (how many optional or
// repeated fields on its path are present) and a repetition level (at which
// repeated field on its path a new element starts).
//
// Hugging Face datasets writes through pyarrow, so a sharegpt column is
//
//	optional group messages (LIST) {
//	  repeated group list {
//	    optional group element { optional binary role (STRING); optional binary content (STRING); }
//	  }
//	}
//
// and it comes out as []any{map[string]any{"role": ..., "content": ...}, ...}.
// The legacy two-level lists (a repeated field with no LIST wrapper) and
// MAP groups (to map[string]any, keys printed with %v) are read too.

// pqNode is a schema node with its place in the column order and levels.
type pqNode struct {
	name       string
	node       parquet.Node
	first, end int // leaf columns [first, end) under this node
	def, rep   int // definition and repetition level of this node itself
	fields     []*pqNode
}

func buildPQ(name string, n parquet.Node, col *int, def, rep int) *pqNode {
	switch {
	case n.Repeated():
		def, rep = def+1, rep+1
	case n.Optional():
		def++
	}
	p := &pqNode{name: name, node: n, first: *col, def: def, rep: rep}
	if n.Leaf() {
		*col++
	} else {
		for _, f := range n.Fields() {
			p.fields = append(p.fields, buildPQ(f.Name(), f, col, def, rep))
		}
	}
	p.end = *col
	return p
}

// sub returns the columns of child c out of the columns of p.
func (p *pqNode) sub(c *pqNode, cols [][]parquet.Value) [][]parquet.Value {
	return cols[c.first-p.first : c.end-p.first]
}

// field assembles a field of a present parent: a list of its instances when
// it is repeated, nil when it is optional and absent.
func (p *pqNode) field(cols [][]parquet.Value) any {
	if len(cols) == 0 || len(cols[0]) == 0 {
		return nil
	}
	if p.node.Repeated() {
		return p.instances(cols)
	}
	if p.node.Optional() && cols[0][0].DefinitionLevel() < p.def {
		return nil
	}
	return p.one(cols)
}

// instances splits a repeated node's values into its elements: a new
// element starts at each value whose repetition level is this node's.
func (p *pqNode) instances(cols [][]parquet.Value) []any {
	out := []any{}
	if cols[0][0].DefinitionLevel() < p.def {
		return out // present zero times
	}
	pos := make([]int, len(cols))
	for pos[0] < len(cols[0]) {
		inst := make([][]parquet.Value, len(cols))
		for j, c := range cols {
			k := pos[j] + 1
			for k < len(c) && c[k].RepetitionLevel() > p.rep {
				k++
			}
			inst[j] = c[pos[j]:k]
			pos[j] = k
		}
		out = append(out, p.one(inst))
	}
	return out
}

// one assembles one present instance of p.
func (p *pqNode) one(cols [][]parquet.Value) any {
	if p.node.Leaf() {
		return leafValue(p.node, cols[0][0])
	}
	if lt := p.node.Type().LogicalType(); isListGroup(p, lt) {
		rep := p.fields[0]
		elems := rep.field(p.sub(rep, cols))
		list, _ := elems.([]any)
		if len(rep.fields) == 1 && !isLegacyTuple(p, rep) {
			// Three-level list: unwrap the element field of each entry.
			for i, e := range list {
				if m, ok := e.(map[string]any); ok {
					list[i] = m[rep.fields[0].name]
				}
			}
		}
		if list == nil {
			list = []any{}
		}
		return list
	}
	if lt := p.node.Type().LogicalType(); lt != nil && isMapType(lt) && len(p.fields) == 1 && len(p.fields[0].fields) == 2 {
		kv := p.fields[0]
		out := map[string]any{}
		entries, _ := kv.field(p.sub(kv, cols)).([]any)
		for _, e := range entries {
			m, _ := e.(map[string]any)
			out[fmt.Sprint(m[kv.fields[0].name])] = m[kv.fields[1].name]
		}
		return out
	}
	out := make(map[string]any, len(p.fields))
	for _, f := range p.fields {
		out[f.name] = f.field(p.sub(f, cols))
	}
	return out
}

func isMapType(lt *format.LogicalType) bool {
	_, ok := lt.Value.(*format.MapType)
	return ok
}

// isListGroup reports whether p is a LIST-annotated group (or one written
// without the annotation that has the shape of one).
func isListGroup(p *pqNode, lt *format.LogicalType) bool {
	if len(p.fields) != 1 || !p.fields[0].node.Repeated() {
		return false
	}
	if lt != nil {
		if _, ok := lt.Value.(*format.ListType); ok {
			return true
		}
	}
	switch p.fields[0].name {
	case "list", "array", "bag":
		return true
	}
	return false
}

// isLegacyTuple applies the Parquet format's backward-compatibility rule: a
// repeated group named "array" or "<list>_tuple" is itself the element.
func isLegacyTuple(list, rep *pqNode) bool {
	return !rep.node.Leaf() && (rep.name == "array" || rep.name == list.name+"_tuple")
}

func leafValue(n parquet.Node, v parquet.Value) any {
	if v.IsNull() {
		return nil
	}
	switch v.Kind() {
	case parquet.Boolean:
		return v.Boolean()
	case parquet.Int32:
		return int64(v.Int32())
	case parquet.Int64:
		return v.Int64()
	case parquet.Float:
		return float64(v.Float())
	case parquet.Double:
		return v.Double()
	case parquet.ByteArray, parquet.FixedLenByteArray:
		return string(v.ByteArray())
	}
	return v.String()
}

// readParquet reads a Parquet file row by row.
func readParquet(path string, fn func(Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("data %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("data %s: %w", path, err)
	}
	if st.Size() == 0 {
		return fmt.Errorf("data %s: the file is empty", path)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return fmt.Errorf("data %s: not a readable Parquet file: %w", path, err)
	}
	if pf.NumRows() == 0 {
		return fmt.Errorf("data %s: the Parquet file holds no rows", path)
	}
	col := 0
	root := buildPQ("", pf.Schema(), &col, 0, 0)
	index := 0
	buf := make([]parquet.Row, 64)
	cols := make([][]parquet.Value, col)
	for g, rg := range pf.RowGroups() {
		rows := rg.Rows()
		for {
			n, err := rows.ReadRows(buf)
			for _, row := range buf[:n] {
				clear(cols)
				row.Range(func(c int, vals []parquet.Value) bool {
					if c < len(cols) {
						cols[c] = vals
					}
					return true
				})
				fields := map[string]any{}
				for _, fld := range root.fields {
					fields[fld.name] = fld.field(root.sub(fld, cols))
				}
				if ferr := fn(Record{Loc: Location{File: path, Index: index}, Fields: fields}); ferr != nil {
					rows.Close()
					return ferr
				}
				index++
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rows.Close()
				return fmt.Errorf("data %s: row group %d, after row %d: %w", path, g, index, err)
			}
			if n == 0 {
				break
			}
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("data %s: row group %d: %w", path, g, err)
		}
	}
	return nil
}
