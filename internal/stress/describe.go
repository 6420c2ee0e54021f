package stress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"text/template"
	"time"
	"unicode"
)

// Descriptions are a family's scenario descriptions, kept as prose
// templates beside the code rather than inside it: one
// {{define "<scenario name>"}} each, executed on the scenario's load. The
// text may be wrapped freely; a rendered description is one paragraph.
type Descriptions struct{ t *template.Template }

// ParseDescriptions parses text, which may call funcs beside the
// built-in helpers (join, mib, pct). The text is the program's own, so a
// parse error panics.
func ParseDescriptions(text string, funcs template.FuncMap) Descriptions {
	t := template.New("").Option("missingkey=error").Funcs(template.FuncMap{
		"join": func(s []string) string { return strings.Join(s, ", ") },
		"mib":  mibOf,
		"pct":  func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
	}).Funcs(funcs)
	return Descriptions{template.Must(t.Parse(text))}
}

// mibOf is MiB for a byte count of any integer type, as templates pass
// fields of several.
func mibOf(b any) (string, error) {
	v := reflect.ValueOf(b)
	if !v.CanInt() {
		return "", fmt.Errorf("mib: %T is not an integer", b)
	}
	return MiB(v.Int()), nil
}

// Render is the description of scenario name for load, with every run of
// white space one space.
func (d Descriptions) Render(name string, load any) (string, error) {
	t := d.t.Lookup(name)
	if t == nil {
		return "", fmt.Errorf("no description of %s", name)
	}
	var b strings.Builder
	if err := t.Execute(&b, load); err != nil {
		return "", err
	}
	return strings.Join(strings.Fields(b.String()), " "), nil
}

// Of is Render's description, or what kept it from rendering: a run
// records it rather than fail (the families' tests render every one).
func (d Descriptions) Of(name string, load any) string {
	desc, err := d.Render(name, load)
	if err != nil {
		return "no description: " + err.Error()
	}
	return desc
}

// Names lists the scenarios described.
func (d Descriptions) Names() []string {
	var names []string
	for _, t := range d.t.Templates() {
		if t.Name() != "" {
			names = append(names, t.Name())
		}
	}
	return names
}

// Params is load as a result's parameters: every exported field by its
// json tag's name (none for "-") or else its name in snake_case, embedded structs'
// fields in line, durations as text, structs and slices of them as maps.
func Params(load any) map[string]any {
	v := reflect.ValueOf(load)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	params := map[string]any{}
	addParams(params, v)
	return params
}

var durationType = reflect.TypeFor[time.Duration]()

func addParams(params map[string]any, v reflect.Value) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			addParams(params, v.Field(i))
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = snake(f.Name)
		}
		params[name] = paramValue(v.Field(i))
	}
}

func paramValue(v reflect.Value) any {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.Struct:
		return Params(v.Interface())
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		list := make([]any, v.Len())
		for i := range list {
			list[i] = Params(v.Index(i).Interface())
		}
		return list
	}
	return v.Interface()
}

// snake writes a Go name in snake_case, an initialism as one word:
// MaxNumSeqs max_num_seqs, NumGPUBlocks num_gpu_blocks, W1Output w1_output.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if !unicode.IsUpper(prev) || nextLower {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// Catalog is every scenario's name, description and parameters as c sets
// them, one section each: the text a family's golden file holds. It fails
// on a scenario without a description, one that does not render, and a
// description of no scenario.
func Catalog[C, R any](d Descriptions, scenarios []Scenario[C, R], c *C) ([]byte, error) {
	var b bytes.Buffer
	var errs []error
	for _, s := range scenarios {
		load := s.Load(c)
		desc, err := d.Render(s.Name, load)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
			continue
		}
		params, err := json.MarshalIndent(Params(load), "", "  ")
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n%s\n\n", s.Name, desc, params)
	}
	names := Names(scenarios)
	for _, n := range d.Names() {
		if !slices.Contains(names, n) {
			errs = append(errs, fmt.Errorf("description of %s, which is no scenario", n))
		}
	}
	return b.Bytes(), errors.Join(errs...)
}
