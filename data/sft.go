package data

import (
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/tokenizer/chat"
)

// SFTOptions say how fine-tuning records become rows of Seq tokens.
type SFTOptions struct {
	// Seq is the row length in tokens (--seq, trl's max_length).
	Seq int
	// Format forces a record format; FormatAuto detects it from the first
	// record's fields.
	Format Format
	// Packing puts several samples in a row by best-fit decreasing (trl's
	// packing_strategy="bfd"), with positions restarting at each sample.
	// Without it each sample has a row of its own, padded.
	Packing bool
	// Truncate cuts a sample longer than Seq to its first Seq tokens (trl's
	// truncation_mode="keep_start") instead of failing; a sample left with
	// no token that takes a loss is then dropped, as trl drops it.
	Truncate bool
	// TrainOnPrompt puts the loss on every token, prompts included
	// (LLaMA-Factory's train_on_prompt; trl's default for "messages" data,
	// assistant_only_loss=False).
	TrainOnPrompt bool
	// ChatTemplate replaces the tokenizer's chat template (Jinja source);
	// "" uses the tokenizer's.
	ChatTemplate string
	// Workers tokenize in parallel; 0 means GOMAXPROCS. The result does
	// not depend on it.
	Workers int
}

// SFTStats describe a loaded fine-tuning set.
type SFTStats struct {
	Files   []string
	Format  Format
	Records int // records read
	Samples int // samples in the rows
	// Empty counts plain-text records with an empty "text", skipped.
	Empty int
	// Truncated counts samples cut to Seq; Dropped those of them left
	// with nothing to learn.
	Truncated, Dropped int
	// PromptMismatch counts prompt-completion records whose prompt
	// tokenizes differently alone than at the start of the whole record
	// (trl warns about these; the loss mask still starts after as many
	// tokens as the prompt alone has). FirstMismatch names the first.
	PromptMismatch int
	FirstMismatch  Location
	Rows           int
	Tokens         int64 // tokens of all samples
	Targets        int64 // of them, the targets that take a loss
}

// Fill is the share of row positions that hold a sample's token.
func (s SFTStats) Fill(seq int) float64 {
	if s.Rows == 0 {
		return 0
	}
	return float64(s.Tokens) / (float64(s.Rows) * float64(seq))
}

// SFTData is a tokenized fine-tuning set cut into rows of Seq tokens. It is
// read-only after LoadSFT and safe for concurrent use.
type SFTData struct {
	Seq     int
	Packing bool
	Pad     int32 // the id padding takes: PAD, else EOS, else 0
	// MaxID is the largest token id in the samples (and Pad): the model's
	// vocabulary must be larger.
	MaxID int32
	Stats SFTStats

	// Samples, flattened: sample i is ids[start[i]:start[i+1]].
	ids, labels []int32
	start       []int
	// Rows: row r holds the samples rowSamples[rowStart[r]:rowStart[r+1]].
	rowStart   []int
	rowSamples []int32
	rowTargets []int32 // targets that take a loss in each row
}

// LoadSFT reads the records of path (see ResolveFiles), converts them by
// their format, tokenizes them, and cuts the samples into rows. Every bad
// record is an error naming its file and index; nothing is skipped silently
// (Stats counts what was, and why).
func LoadSFT(path string, tok Tokenizer, opt SFTOptions) (*SFTData, error) {
	if opt.Seq < 2 {
		return nil, fmt.Errorf("data: sequence length %d is too short for fine-tuning (need at least 2 tokens)", opt.Seq)
	}
	files, err := ResolveFiles(path)
	if err != nil {
		return nil, err
	}
	enc, err := newEncoder(tok, opt)
	if err != nil {
		return nil, err
	}
	st := SFTStats{Files: files, Format: opt.Format}
	var examples []example
	err = ReadRecords(files, func(rec Record) error {
		st.Records++
		if st.Format == FormatAuto {
			f, err := detectFormat(rec)
			if err != nil {
				return err
			}
			st.Format = f
		}
		ex, err := toExample(rec, st.Format)
		if err != nil {
			return err
		}
		if ex.kind == kindText && ex.Text == "" {
			st.Empty++
			return nil
		}
		examples = append(examples, ex)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(examples) == 0 {
		return nil, fmt.Errorf("data %s: no records to train on (%d read, %d with empty text)", path, st.Records, st.Empty)
	}
	samples, err := encodeAll(enc, examples, opt.Workers)
	if err != nil {
		return nil, err
	}
	d := &SFTData{Seq: opt.Seq, Packing: opt.Packing, Pad: padID(tok)}
	d.start = append(d.start, 0)
	for i := range samples {
		s, ex := &samples[i], &examples[i]
		cut := len(s.ids) > opt.Seq
		if cut {
			if !opt.Truncate {
				return nil, fmt.Errorf("%s: the sample is %d tokens, longer than the sequence length %d; "+
					"raise --seq, shorten or drop the record, or turn on truncation", ex.Loc, len(s.ids), opt.Seq)
			}
			s.ids, s.labels = s.ids[:opt.Seq], s.labels[:opt.Seq]
			st.Truncated++
		}
		if s.targets() == 0 {
			if cut {
				st.Dropped++
				continue
			}
			return nil, fmt.Errorf("%s: the sample has no token that takes a loss (%s); "+
				"give it a response, or train on the prompt too", ex.Loc, noTargetReason(ex))
		}
		if s.prefixMismatch {
			if st.PromptMismatch == 0 {
				st.FirstMismatch = ex.Loc
			}
			st.PromptMismatch++
		}
		for _, id := range s.ids {
			d.MaxID = max(d.MaxID, id)
		}
		d.ids = append(d.ids, s.ids...)
		d.labels = append(d.labels, s.labels...)
		d.start = append(d.start, len(d.ids))
		st.Tokens += int64(len(s.ids))
		st.Targets += int64(s.targets())
	}
	st.Samples = len(d.start) - 1
	if st.Samples == 0 {
		return nil, fmt.Errorf("data %s: every sample was dropped after truncation to %d tokens (its prompt alone fills the row); raise --seq",
			path, opt.Seq)
	}
	d.MaxID = max(d.MaxID, d.Pad)
	d.buildRows()
	st.Rows = len(d.rowStart) - 1
	d.Stats = st
	return d, nil
}

func noTargetReason(ex *example) string {
	switch ex.kind {
	case kindChat:
		return "the conversation has no assistant message"
	case kindPromptText, kindPromptChat:
		return "the completion is empty"
	}
	return "the text is a single token"
}

func newEncoder(tok Tokenizer, opt SFTOptions) (*encoder, error) {
	e := &encoder{tok: tok, eos: tok.Special().EOS, trainOnPrompt: opt.TrainOnPrompt}
	cfg := tok.Config()
	special := map[string]string{
		"bos_token": cfg.BOSToken, "eos_token": cfg.EOSToken,
		"pad_token": cfg.PADToken, "unk_token": cfg.UNKToken,
	}
	var err error
	switch {
	case opt.ChatTemplate != "":
		if e.tmpl, err = chat.New(opt.ChatTemplate, special); err != nil {
			return nil, fmt.Errorf("data: the chat template given: %w", err)
		}
	case cfg.ChatTemplate != "":
		if e.tmpl, err = chat.FromConfig(cfg); err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
	default:
		if e.alpaca, err = chat.New(AlpacaTemplate, special); err != nil {
			return nil, fmt.Errorf("data: the built-in alpaca template: %w", err)
		}
	}
	return e, nil
}

func padID(tok Tokenizer) int32 {
	sp := tok.Special()
	switch {
	case sp.PAD >= 0:
		return int32(sp.PAD)
	case sp.EOS >= 0:
		return int32(sp.EOS)
	}
	return 0
}

// encodeAll tokenizes the examples on a bounded pool of workers. The error
// returned is the one of the first bad example in record order.
func encodeAll(enc *encoder, examples []example, workers int) ([]sample, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(examples))
	out := make([]sample, len(examples))
	errs := make([]error, len(examples))
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = enc.encode(&examples[i])
			}
		}()
	}
	for i := range examples {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return nil, err
	}
	return out, nil
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// buildRows cuts the samples into rows: by BFD when packing, else one
// sample a row, in record order.
func (d *SFTData) buildRows() {
	n := len(d.start) - 1
	var bins [][]int
	if d.Packing {
		lengths := make([]int, n)
		for i := range lengths {
			lengths[i] = d.start[i+1] - d.start[i]
		}
		bins = packBFD(lengths, d.Seq)
	} else {
		bins = make([][]int, n)
		for i := range bins {
			bins[i] = []int{i}
		}
	}
	d.rowStart = append(d.rowStart[:0], 0)
	for _, bin := range bins {
		t := 0
		for _, s := range bin {
			d.rowSamples = append(d.rowSamples, int32(s))
			t += d.sampleTargets(s)
		}
		d.rowStart = append(d.rowStart, len(d.rowSamples))
		d.rowTargets = append(d.rowTargets, int32(t))
	}
}

func (d *SFTData) sampleTargets(s int) int {
	n := 0
	for _, l := range d.labels[d.start[s]+1 : d.start[s+1]] {
		if l != model.IgnoreIndex {
			n++
		}
	}
	return n
}

// Rows is the number of rows in one epoch.
func (d *SFTData) Rows() int { return len(d.rowStart) - 1 }

// Sample returns sample i's ids and labels (label = id where the token takes
// a loss, else IgnoreIndex). The slices are the data's own: do not modify.
func (d *SFTData) Sample(i int) (ids, labels []int32) {
	return d.ids[d.start[i]:d.start[i+1]], d.labels[d.start[i]:d.start[i+1]]
}

// RowSamples returns the samples of row r, in the order they sit in it.
func (d *SFTData) RowSamples(r int) []int32 { return d.rowSamples[d.rowStart[r]:d.rowStart[r+1]] }

// RowTargets is the number of targets that take a loss in row r.
func (d *SFTData) RowTargets(r int) int { return int(d.rowTargets[r]) }

// FillRow writes row r into tokens, targets and positions (Seq each;
// positions may be nil). Each sample's tokens sit one after another; the
// target at position k is the sample's label of token k+1, and the last
// token of a sample predicts nothing (IgnoreIndex), so no target crosses
// from one sample into the next. Positions restart at 0 at each sample.
// The rest of the row is padding: the pad id, IgnoreIndex targets, and
// positions that go on counting from the last sample's.
func (d *SFTData) FillRow(r int, tokens, targets, positions []int32) {
	pos := 0
	last := 0
	for _, s := range d.RowSamples(r) {
		ids, labels := d.Sample(int(s))
		n := len(ids)
		copy(tokens[pos:pos+n], ids)
		copy(targets[pos:pos+n-1], labels[1:])
		targets[pos+n-1] = model.IgnoreIndex
		if positions != nil {
			for k := 0; k < n; k++ {
				positions[pos+k] = int32(k)
			}
		}
		pos += n
		last = n
	}
	for k := pos; k < d.Seq; k++ {
		tokens[k] = d.Pad
		targets[k] = model.IgnoreIndex
		if positions != nil {
			positions[k] = int32(last + k - pos)
		}
	}
}

// Describe is a one-line summary for the log.
func (s SFTStats) Describe(seq int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d records (%s) → %d samples in %d rows of %d tokens (%.0f%% filled), %d tokens, %d targets",
		s.Records, s.Format, s.Samples, s.Rows, seq, 100*s.Fill(seq), s.Tokens, s.Targets)
	if s.Empty > 0 {
		fmt.Fprintf(&b, "; %d empty texts skipped", s.Empty)
	}
	if s.Truncated > 0 {
		fmt.Fprintf(&b, "; %d truncated (%d of them dropped, nothing left to learn)", s.Truncated, s.Dropped)
	}
	if s.PromptMismatch > 0 {
		fmt.Fprintf(&b, "; %d prompts tokenize differently alone than inside their record (first: %s)", s.PromptMismatch, s.FirstMismatch)
	}
	return b.String()
}
