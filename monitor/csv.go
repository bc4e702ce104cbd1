package monitor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dszero/dszero/monitor/internal/pyfmt"
)

// CSV is DeepSpeed's csvMonitor: one file per tag in output_path/job_name,
// named after the tag with "/" and " " replaced by "_" (so
// Train/Samples/train_loss goes to Train_Samples_train_loss.csv), holding a
// header row "step,<last path element of the tag>" and then one row
// "<step>,<value>" per event.
//
// The text is what Python's csv.writer writes: rows end in "\r\n", a field
// holding a comma, quote, CR or LF is quoted with quotes doubled, and the
// value is the Python float's repr (0.0001, 1e-05, 65536.0, nan). DeepSpeed
// writes a header the first time a process writes a tag, even into a file a
// previous run left, so a resumed run's file has a second header in the
// middle; CSV writes the header only into an empty file, and a resumed run
// appends rows that a CSV reader parses as one table.
type CSV struct {
	dir    string
	files  map[string]*os.File // by file name
	rows   map[string][]byte   // a Write's rows per file, reused
	order  []string            // the files of one Write in first-event order
	closed bool
}

// NewCSV creates dir.
func NewCSV(dir string) (*CSV, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("monitor: csv_monitor output_path/job_name: %w", err)
	}
	return &CSV{dir: dir, files: map[string]*os.File{}, rows: map[string][]byte{}}, nil
}

// FileName is the file csv_monitor writes tag's events to.
func FileName(tag string) string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(tag) + ".csv"
}

// csvField quotes s as Python's csv module does with QUOTE_MINIMAL.
func csvField(s string) string {
	if !strings.ContainsAny(s, ",\"\r\n") {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func (c *CSV) file(name, tag string) (*os.File, error) {
	if f, ok := c.files[name]; ok {
		return f, nil
	}
	path := filepath.Join(c.dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("monitor: csv_monitor: %w", err)
	}
	st, err := f.Stat()
	if err == nil && st.Size() == 0 {
		header := tag[strings.LastIndex(tag, "/")+1:]
		_, err = f.WriteString("step," + csvField(header) + "\r\n")
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("monitor: csv_monitor: %s: %w", path, err)
	}
	c.files[name] = f
	return f, nil
}

// Write appends each event's row to its tag's file, one write per file.
func (c *CSV) Write(events []Event) error {
	if c.closed {
		return fmt.Errorf("monitor: csv_monitor %s: write after Close", c.dir)
	}
	for _, e := range events {
		if _, err := c.file(FileName(e.Tag), e.Tag); err != nil {
			return fmt.Errorf("%w (at step %d)", err, e.Step)
		}
	}
	c.order = c.order[:0]
	for _, e := range events {
		name := FileName(e.Tag)
		row := c.rows[name]
		if len(row) == 0 {
			c.order = append(c.order, name)
		}
		row = strconv.AppendInt(row, e.Step, 10)
		row = append(row, ',')
		row = append(row, pyfmt.Repr(e.Value)...)
		c.rows[name] = append(row, '\r', '\n')
	}
	var errs []error
	for _, name := range c.order {
		if _, err := c.files[name].Write(c.rows[name]); err != nil {
			errs = append(errs, fmt.Errorf("monitor: csv_monitor: %w", err))
		}
		c.rows[name] = c.rows[name][:0]
	}
	return errors.Join(errs...)
}

// Close fsyncs and closes every file.
func (c *CSV) Close() error {
	c.closed = true
	var errs []error
	for name, f := range c.files {
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			errs = append(errs, fmt.Errorf("monitor: csv_monitor: %s: %w", filepath.Join(c.dir, name), err))
		}
		delete(c.files, name)
	}
	return errors.Join(errs...)
}
