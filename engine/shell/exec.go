package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/schema"
	"google.golang.org/grpc"
)

// Shell runs commands against a cluster.
type Shell struct {
	Client *client.Client
	Out    io.Writer
	// Timeout bounds one command. Default 60 s.
	Timeout time.Duration
}

// UsageError is a command used the wrong way; its message says the right way.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usage(format string, a ...any) error { return &UsageError{Msg: fmt.Sprintf(format, a...)} }

type verb struct {
	run  func(s *Shell, ctx context.Context, args []Value) error
	help string
}

var verbs map[string]verb

func init() {
	verbs = map[string]verb{
		"create":             {(*Shell).create, "create 'ns:t', 'f1', {NAME => 'f2', VERSIONS => 3}, {SPLITS => ['a', 'm']} or {NUMREGIONS => 8}, {REGION_REPLICATION => 2}"},
		"put":                {(*Shell).put, "put 't', 'row', 'f:q', 'value'[, timestamp][, {TTL => ms, ACL => {'user' => 'RW', '@group' => 'R'}, VISIBILITY => 'secret&!eu'}]"},
		"get":                {(*Shell).get, "get 't', 'row'[, 'f:q' | {COLUMNS => ['f:q'], VERSIONS => n, TIMERANGE => [from, to], CONSISTENCY => 'TIMELINE', AUTHORIZATIONS => ['secret']}]"},
		"scan":               {(*Shell).scan, "scan 't'[, {STARTROW => 'a', STOPROW => 'z', LIMIT => n, COLUMNS => [...], REVERSED => true, VERSIONS => n, RAW => true, CONSISTENCY => 'TIMELINE', AUTHORIZATIONS => ['secret']}]"},
		"delete":             {(*Shell).delete, "delete 't', 'row', 'f:q'[, timestamp][, {VISIBILITY => 'secret'}]"},
		"deleteall":          {(*Shell).deleteall, "deleteall 't', 'row'[, 'f:q'[, timestamp]][, {VISIBILITY => 'secret'}]"},
		"incr":               {(*Shell).incr, "incr 't', 'row', 'f:q'[, amount]"},
		"count":              {(*Shell).count, "count 't'[, {INTERVAL => n}]"},
		"aggregate":          {(*Shell).aggregate, "aggregate 't', 'f:q'[, {TYPE => 'long' | 'double', MEDIAN => true, STARTROW => 'a', STOPROW => 'z', ROWPREFIXFILTER => 'p', TIMERANGE => [from, to], VERSIONS => n}] (count, sum, min, max, avg, std of a column's 8-byte numbers, computed in the region servers)"},
		"bulk_delete":        {(*Shell).bulkDelete, "bulk_delete 't', {DELETE_TYPE => 'ROW' | 'FAMILY' | 'COLUMN' | 'VERSION', STARTROW => 'a', STOPROW => 'z', ROWPREFIXFILTER => 'p', COLUMNS => [...], TIMERANGE => [from, to], VERSIONS => n, TIMESTAMP => ts, BATCH => rows} (deletes what the scan reads, in the region servers)"},
		"list":               {(*Shell).list, "list['regex']"},
		"describe":           {(*Shell).describe, "describe 't'"},
		"alter":              {(*Shell).alter, "alter 't', {NAME => 'f', VERSIONS => 5} | {NAME => 'f', METHOD => 'delete'} | {REGION_REPLICATION => 2} | FUNCTION => {NAME => 'fn', FILE => 'path/to/module.wasm', MEMORY_MB => 16, TIMEOUT_MS => 100, MAX_FAILURES => 5, ARGS => {'k' => 'v'}} | {METHOD => 'function_unset', NAME => 'fn'}"},
		"call_function":      {(*Shell).callFunction, "call_function 't', 'function', 'endpoint'[, 'argument'][, {STARTROW => 'a', STOPROW => 'z', ROWPREFIXFILTER => 'p', COLUMNS => ['f'], TIMERANGE => [from, to]}] (runs a table function's endpoint in the region servers; prints each region's answer)"},
		"disable":            {tableOp("disable"), "disable 't'"},
		"enable":             {tableOp("enable"), "enable 't'"},
		"drop":               {tableOp("drop"), "drop 't' (the table must be disabled)"},
		"truncate":           {tableOp("truncate"), "truncate 't' (disables, empties and enables the table, keeping its splits)"},
		"move":               {(*Shell).move, "move 'region'[, 'host:port']"},
		"split":              {(*Shell).split, "split 't' | 'region'[, 'splitKey'] (every region of a table at its midpoint, or one region; the region holding splitKey when a table is named)"},
		"merge_region":       {(*Shell).mergeRegion, "merge_region 'region', 'region' | ['region', 'region'] (two neighbouring regions of a table into one)"},
		"normalize":          {(*Shell).normalize, "normalize ['t'] (the region normalizer now: tables with NORMALIZATION_ENABLED, or the one named)"},
		"normalizer_switch":  {(*Shell).normalizerSwitch, "normalizer_switch true|false (the normalizer's periodic runs)"},
		"normalizer_enabled": {(*Shell).normalizerEnabled, "normalizer_enabled"},
		"update_config":      {(*Shell).updateConfig, "update_config 'host:port' (a region server or the master re-reads its configuration file; settings that change online apply at once)"},
		"update_all_config":  {(*Shell).updateAllConfig, "update_all_config (the master and every region server re-read their configuration files)"},
		"flush":              {flushCompact(pb.FlushCompactRequest_KIND_FLUSH), "flush 't' | 'region' (writes the memstores of a table's regions, or one region's, to store files)"},
		"compact":            {flushCompact(pb.FlushCompactRequest_KIND_COMPACT), "compact 't' | 'region' (a minor compaction of each region)"},
		"major_compact":      {flushCompact(pb.FlushCompactRequest_KIND_MAJOR_COMPACT), "major_compact 't' | 'region' (rewrites each region's files into one per family, dropping deleted and expired cells)"},
		"balancer":           {(*Shell).balancer, "balancer"},
		"balance_switch":     {(*Shell).balanceSwitch, "balance_switch true|false"},
		"drain":              {(*Shell).drain, "drain 'host:port' (move its regions away; no new ones)"},
		"undrain":            {(*Shell).undrain, "undrain 'host:port' (take regions again)"},
		"status":             {(*Shell).status, "status['simple' | 'detailed']"},
		"list_regions":       {(*Shell).listRegions, "list_regions 't' (every region and replica: server, state, start and end keys)"},
		"set_quota":          {(*Shell).setQuota, "set_quota TYPE => THROTTLE, USER => 'u' | TABLE => 't' | NAMESPACE => 'ns', LIMIT => '100req/sec' | NONE[, THROTTLE_TYPE => READ | WRITE]"},
		"list_quotas":        {(*Shell).listQuotas, "list_quotas"},
		"grant":              {(*Shell).grant, "grant 'user' | '@group', 'RWXCA'[, '@namespace' | 'table'[, 'family'[, 'qualifier']]] (security on)"},
		"revoke":             {(*Shell).revoke, "revoke 'user' | '@group'[, '@namespace' | 'table'[, 'family'[, 'qualifier']]]"},
		"user_permission":    {(*Shell).userPermission, "user_permission['@namespace' | 'table']"},
		"add_labels":         {(*Shell).addLabels, "add_labels 'label' | ['label', ...]"},
		"list_labels":        {(*Shell).listLabels, "list_labels['regex']"},
		"set_auths":          {(*Shell).setAuths, "set_auths 'user' | '@group', 'label' | ['label', ...]"},
		"get_auths":          {(*Shell).getAuths, "get_auths 'user' | '@group'"},
		"clear_auths":        {(*Shell).clearAuths, "clear_auths 'user' | '@group', 'label' | ['label', ...]"},
		"snapshot":           {(*Shell).snapshot, "snapshot 't', 'name'[, {SKIP_FLUSH => true}] (a manifest of the table's files; no data copied)"},
		"list_snapshots":     {(*Shell).listSnapshots, "list_snapshots['regex']"},
		"archive_wal":        {(*Shell).archiveWAL, "archive_wal (every live region server archives its WAL now: point-in-time recovery reaches every write acknowledged before it)"},
		"delete_snapshot":    {(*Shell).deleteSnapshot, "delete_snapshot 'name'"},
		"clone_snapshot":     {(*Shell).cloneSnapshot, "clone_snapshot 'name', 'new_table'[, {UNTIL => 'time'}] (a new table made of the snapshot's files; UNTIL: to that point in time, from the WAL archive)"},
		"restore_snapshot":   {(*Shell).restoreSnapshot, "restore_snapshot 'name'[, {UNTIL => 'time'}] (the table must be disabled; it stays disabled; a dropped table comes back; UNTIL: to that point in time, from the WAL archive)"},
	}
}

// Verbs lists the commands with their usage.
func Verbs() map[string]string {
	out := map[string]string{}
	for k, v := range verbs {
		out[k] = v.help
	}
	return out
}

// Run parses and runs one line, printing its output and how long it took.
func (s *Shell) Run(ctx context.Context, line string) error {
	cmd, err := Parse(line)
	if err != nil {
		return err
	}
	if cmd.Verb == "" {
		return nil
	}
	if cmd.Verb == "help" {
		names := make([]string, 0, len(verbs))
		for n := range verbs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(s.Out, "  %s\n", verbs[n].help)
		}
		return nil
	}
	v, ok := verbs[cmd.Verb]
	if !ok {
		return usage("unknown command %q (type 'help' for the list)", cmd.Verb)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	if err := v.run(s, ctx, cmd.Args); err != nil {
		var ue *UsageError
		if errors.As(err, &ue) {
			return fmt.Errorf("%s\nusage: %s", ue.Msg, v.help)
		}
		return err
	}
	fmt.Fprintf(s.Out, "Took %.4f seconds\n", time.Since(start).Seconds())
	return nil
}

// ---- argument helpers ----

func str(args []Value, i int, what string) (string, error) {
	if i >= len(args) {
		return "", usage("missing %s", what)
	}
	if args[i].Kind != String && args[i].Kind != Const {
		return "", usage("%s must be a string, got %s", what, args[i])
	}
	return args[i].Str, nil
}

func optHash(args []Value, i int) (Value, error) {
	if i >= len(args) {
		return Value{Kind: Hash, Map: map[string]Value{}}, nil
	}
	if args[i].Kind != Hash {
		return Value{}, usage("argument %d must be a {KEY => value} hash, got %s", i+1, args[i])
	}
	return args[i], nil
}

func column(spec string) (family, qualifier string, err error) {
	f, q, ok := strings.Cut(spec, ":")
	if f == "" {
		return "", "", usage("bad column %q: want 'family:qualifier'", spec)
	}
	if !ok {
		return f, "", nil
	}
	return f, q, nil
}

func intOf(v Value, what string) (int64, error) {
	switch v.Kind {
	case Int:
		return v.Int, nil
	case String, Const:
		var n int64
		if _, err := fmt.Sscan(v.Str, &n); err == nil {
			return n, nil
		}
	}
	return 0, usage("%s must be a number, got %s", what, v)
}

// int32Of is intOf for a 32-bit field: a number outside its range is refused, never wrapped.
func int32Of(v Value, what string) (int32, error) {
	n, err := intOf(v, what)
	if err != nil {
		return 0, err
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, usage("%s %d is out of range (at most %d)", what, n, math.MaxInt32)
	}
	return int32(n), nil
}

func boolOf(v Value) bool {
	return v.Kind == Const && strings.EqualFold(v.Str, "true") || v.Kind == String && strings.EqualFold(v.Str, "true") || v.Kind == Int && v.Int != 0
}

func columns(v Value) ([]*pb.Column, error) {
	var specs []string
	switch v.Kind {
	case String:
		specs = []string{v.Str}
	case Array:
		for _, it := range v.Items {
			specs = append(specs, it.Text())
		}
	default:
		return nil, usage("COLUMNS must be a string or an array of strings")
	}
	byFam := map[string]*pb.Column{}
	var out []*pb.Column
	for _, sp := range specs {
		f, q, err := column(sp)
		if err != nil {
			return nil, err
		}
		c := byFam[f]
		if c == nil {
			c = &pb.Column{Family: []byte(f)}
			byFam[f] = c
			out = append(out, c)
		}
		if q != "" {
			c.Qualifiers = append(c.Qualifiers, []byte(q))
		}
	}
	return out, nil
}

func timeRange(v Value) (*pb.TimeRange, error) {
	if v.Kind != Array || len(v.Items) != 2 {
		return nil, usage("TIMERANGE must be [from, to]")
	}
	from, err := intOf(v.Items[0], "TIMERANGE start")
	if err != nil {
		return nil, err
	}
	to, err := intOf(v.Items[1], "TIMERANGE end")
	if err != nil {
		return nil, err
	}
	if to < from {
		return nil, usage("TIMERANGE [%d, %d] ends before it starts", from, to)
	}
	if to == from {
		return pb.EmptyTimeRange(), nil // [t, t) holds nothing (HBase's shell reads nothing)
	}
	return &pb.TimeRange{From: from, To: to}, nil
}

func consistency(v Value) (pb.Consistency, error) {
	switch strings.ToUpper(v.Text()) {
	case "STRONG":
		return pb.Consistency_CONSISTENCY_STRONG, nil
	case "TIMELINE":
		return pb.Consistency_CONSISTENCY_TIMELINE, nil
	}
	return 0, usage("CONSISTENCY must be 'STRONG' or 'TIMELINE'")
}

// ---- data commands ----

func (s *Shell) put(ctx context.Context, args []Value) error {
	if len(args) < 4 || len(args) > 6 {
		return usage("put takes a table, a row, a column, a value, and optionally a timestamp and {TTL => milliseconds}")
	}
	t, _ := str(args, 0, "table")
	row, _ := str(args, 1, "row")
	col, err := str(args, 2, "column")
	if err != nil {
		return err
	}
	f, q, err := column(col)
	if err != nil {
		return err
	}
	ts := cell.LatestTimestamp
	rest := args[4:]
	if len(rest) > 0 && rest[0].Kind != Hash {
		if ts, err = intOf(rest[0], "timestamp"); err != nil {
			return err
		}
		rest = rest[1:]
	}
	m := client.NewPut(ParseBinary(row)).Add(f, q, ts, ParseBinary(args[3].Text()))
	if len(rest) > 0 {
		h := rest[0]
		if h.Kind != Hash || len(rest) > 1 {
			return usage("put's last argument must be a {TTL => milliseconds, ACL => {'user' => 'RW'}, VISIBILITY => 'expression'} hash")
		}
		for _, k := range h.Keys {
			if k == "VISIBILITY" {
				m.Visibility = h.Map[k].Text()
				continue
			}
			if k == "ACL" {
				acl, err := cellACL(h.Map[k])
				if err != nil {
					return err
				}
				m.ACL = acl
				continue
			}
			if k != "TTL" {
				return usage("put does not know %s (it takes TTL, ACL and VISIBILITY)", k)
			}
			ttl, err := intOf(h.Map[k], k)
			if err != nil {
				return err
			}
			if ttl <= 0 {
				return usage("TTL must be a positive number of milliseconds")
			}
			m.TTL = time.Duration(ttl) * time.Millisecond
		}
	}
	return s.Client.Table(t).Put(ctx, m)
}

func (s *Shell) get(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	row, err := str(args, 1, "row")
	if err != nil {
		return err
	}
	g := &pb.Get{Row: ParseBinary(row)}
	if len(args) > 2 {
		if args[2].Kind == String || args[2].Kind == Array {
			if g.Columns, err = columns(args[2]); err != nil {
				return err
			}
		} else {
			h := args[2]
			if h.Kind != Hash {
				return usage("the third argument must be a column or a {KEY => value} hash")
			}
			for _, k := range h.Keys {
				v := h.Map[k]
				switch k {
				case "COLUMN", "COLUMNS":
					g.Columns, err = columns(v)
				case "VERSIONS":
					g.MaxVersions, err = int32Of(v, k)
				case "TIMESTAMP":
					var ts int64
					ts, err = intOf(v, k)
					g.TimeRange = &pb.TimeRange{From: ts, To: ts + 1}
				case "TIMERANGE":
					g.TimeRange, err = timeRange(v)
				case "CONSISTENCY":
					g.Consistency, err = consistency(v)
				case "AUTHORIZATIONS":
					g.Attributes, err = authorizations(g.Attributes, v)
				default:
					err = usage("get does not know %s", k)
				}
				if err != nil {
					return err
				}
			}
		}
	}
	r, err := s.Client.Table(t).Get(ctx, g)
	if err != nil {
		return err
	}
	tb := newTable(s.Out, "COLUMN", "CELL")
	for i := range r.Cells {
		c := &r.Cells[i]
		tb.row(Binary(c.Family)+":"+Binary(c.Qualifier), cellText(c, false))
	}
	tb.done()
	n := 0
	if len(r.Cells) > 0 {
		n = 1
	}
	stale := ""
	if r.Stale {
		stale = " (STALE: answered by a read replica)"
	}
	fmt.Fprintf(s.Out, "%d row(s)%s\n", n, stale)
	return nil
}

func (s *Shell) scanOf(args []Value) (*pb.Scan, error) {
	h, err := optHash(args, 1)
	if err != nil {
		return nil, err
	}
	return scanFromHash(h, "scan", func(k string, _ Value) bool { return k == "INTERVAL" }) // INTERVAL: count's option
}

// scanFromHash reads a scan's options from a hash; the keys other says are its command's own
// are left to it.
func scanFromHash(h Value, cmd string, other func(k string, v Value) bool) (*pb.Scan, error) {
	sc := &pb.Scan{}
	var err error
	for _, k := range h.Keys {
		v := h.Map[k]
		if other != nil && other(k, v) {
			continue
		}
		switch k {
		case "STARTROW":
			sc.StartRow = ParseBinary(v.Text())
		case "STOPROW", "ENDROW":
			sc.StopRow = ParseBinary(v.Text())
		case "LIMIT":
			sc.Limit, err = int32Of(v, k)
		case "COLUMNS", "COLUMN":
			sc.Columns, err = columns(v)
		case "REVERSED":
			sc.Reversed = boolOf(v)
		case "RAW":
			sc.Raw = boolOf(v)
		case "VERSIONS":
			sc.MaxVersions, err = int32Of(v, k)
		case "CACHE", "CACHING":
			sc.Caching, err = int32Of(v, k)
		case "TIMERANGE":
			sc.TimeRange, err = timeRange(v)
		case "CONSISTENCY":
			sc.Consistency, err = consistency(v)
		case "AUTHORIZATIONS":
			sc.Attributes, err = authorizations(sc.Attributes, v)
		case "ROWPREFIXFILTER":
			p := ParseBinary(v.Text())
			sc.StartRow, sc.StopRow = p, prefixEnd(p)
		default:
			err = usage("%s does not know %s", cmd, k)
		}
		if err != nil {
			return nil, err
		}
	}
	return sc, nil
}

func (s *Shell) scan(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	sc, err := s.scanOf(args)
	if err != nil {
		return err
	}
	scanner := s.Client.Table(t).Scan(ctx, sc)
	defer scanner.Close()
	tb := newTable(s.Out, "ROW", "COLUMN+CELL")
	rows, stale := 0, false
	for {
		r, ok := scanner.Next()
		if !ok {
			break
		}
		rows++
		stale = stale || r.Stale
		for i := range r.Cells {
			tb.row(Binary(r.Cells[i].Row), cellText(&r.Cells[i], true))
		}
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	tb.done()
	note := ""
	if stale {
		note = " (STALE: some rows were answered by a read replica)"
	}
	fmt.Fprintf(s.Out, "%d row(s)%s\n", rows, note)
	return nil
}

func (s *Shell) count(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	sc, err := s.scanOf(args)
	if err != nil {
		return err
	}
	interval := int64(1000)
	if h, _ := optHash(args, 1); h.Map["INTERVAL"].Kind == Int {
		interval = max(1, h.Map["INTERVAL"].Int)
	}
	if sc.Caching == 0 {
		sc.Caching = 1000
	}
	scanner := s.Client.Table(t).Scan(ctx, sc)
	defer scanner.Close()
	var n int64
	for {
		r, ok := scanner.Next()
		if !ok {
			break
		}
		n++
		if n%interval == 0 {
			fmt.Fprintf(s.Out, "Current count: %d, row: %s\n", n, Binary(r.Row))
		}
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "%d row(s)\n", n)
	return nil
}

func (s *Shell) delete(ctx context.Context, args []Value) error {
	n := len(args)
	if n > 0 && args[n-1].Kind == Hash {
		n--
	}
	if n < 3 || n > 4 {
		return usage("delete takes a table, a row, a column, optionally a timestamp and {VISIBILITY => 'expression'}")
	}
	return s.deleteall(ctx, args)
}

func (s *Shell) deleteall(ctx context.Context, args []Value) error {
	visibility := ""
	if n := len(args); n > 0 && args[n-1].Kind == Hash {
		for _, k := range args[n-1].Keys {
			if k != "VISIBILITY" {
				return usage("delete does not know %s (it takes VISIBILITY)", k)
			}
			visibility = args[n-1].Map[k].Text()
		}
		args = args[:n-1]
	}
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	row, err := str(args, 1, "row")
	if err != nil {
		return err
	}
	m := client.NewDelete(ParseBinary(row))
	m.Visibility = visibility
	if len(args) > 4 {
		return usage("deleteall takes a table, a row, optionally a column and a timestamp, and {VISIBILITY => 'expression'}")
	}
	ts := cell.LatestTimestamp
	if len(args) == 4 {
		if ts, err = intOf(args[3], "timestamp"); err != nil {
			return err
		}
	}
	if len(args) >= 3 {
		col, err := str(args, 2, "column")
		if err != nil {
			return err
		}
		f, q, err := column(col)
		if err != nil {
			return err
		}
		// As HBase's shell: every version up to the timestamp of the column (or family).
		if q == "" && !strings.Contains(col, ":") {
			m.AddMarker(cell.DeleteFamily, f, "", ts)
		} else {
			m.AddMarker(cell.DeleteColumn, f, q, ts)
		}
	}
	_, err = s.Client.Table(t).Mutate(ctx, m)
	return err
}

func (s *Shell) incr(ctx context.Context, args []Value) error {
	if len(args) < 3 || len(args) > 4 {
		return usage("incr takes a table, a row, a column and optionally an amount")
	}
	t, _ := str(args, 0, "table")
	row, _ := str(args, 1, "row")
	col, err := str(args, 2, "column")
	if err != nil {
		return err
	}
	f, q, err := column(col)
	if err != nil {
		return err
	}
	amount := int64(1)
	if len(args) == 4 {
		if amount, err = intOf(args[3], "amount"); err != nil {
			return err
		}
	}
	r, err := s.Client.Table(t).Mutate(ctx, client.NewIncrement(ParseBinary(row)).AddAmount(f, q, amount))
	if err != nil {
		return err
	}
	if v, ok := r.Int64(f, q); ok {
		fmt.Fprintf(s.Out, "COUNTER VALUE = %d\n", v)
	}
	return nil
}

// ---- DDL and admin ----

func (s *Shell) master(ctx context.Context, fn func(context.Context, pb.MasterClient) error) error {
	return s.Client.Master(ctx, fn)
}

var families = map[string]func(*pb.ColumnFamilyDescriptor, Value) error{
	"VERSIONS": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		var err error
		d.MaxVersions, err = int32Of(v, "VERSIONS")
		return err
	},
	"MIN_VERSIONS": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		var err error
		d.MinVersions, err = int32Of(v, "MIN_VERSIONS")
		return err
	},
	"TTL": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		if strings.EqualFold(v.Text(), "FOREVER") {
			d.TtlSeconds = 0
			return nil
		}
		n, err := intOf(v, "TTL")
		d.TtlSeconds = n
		return err
	},
	"BLOCKSIZE": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		var err error
		d.BlockSize, err = int32Of(v, "BLOCKSIZE")
		return err
	},
	"IN_MEMORY": func(d *pb.ColumnFamilyDescriptor, v Value) error { d.InMemory = boolOf(v); return nil },
	"IN_MEMORY_COMPACTION": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		e, ok := pb.InMemoryCompaction_value["IN_MEMORY_COMPACTION_"+strings.ToUpper(v.Text())]
		if !ok {
			return usage("IN_MEMORY_COMPACTION must be NONE, BASIC or EAGER")
		}
		d.InMemoryCompaction = pb.InMemoryCompaction(e)
		return nil
	},
	"BLOCKCACHE": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		d.BlockCacheDisabled = !boolOf(v)
		return nil
	},
	"KEEP_DELETED_CELLS": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		switch strings.ToUpper(v.Text()) {
		case "FALSE":
			d.KeepDeletedCells = pb.KeepDeletedCells_KEEP_DELETED_CELLS_FALSE
		case "TRUE":
			d.KeepDeletedCells = pb.KeepDeletedCells_KEEP_DELETED_CELLS_TRUE
		case "TTL":
			d.KeepDeletedCells = pb.KeepDeletedCells_KEEP_DELETED_CELLS_TTL
		default:
			return usage("KEEP_DELETED_CELLS must be FALSE, TRUE or TTL")
		}
		return nil
	},
	"BLOOMFILTER": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		x, ok := pb.BloomType_value["BLOOM_TYPE_"+strings.ToUpper(v.Text())]
		if !ok {
			return usage("BLOOMFILTER must be NONE, ROW or ROWCOL")
		}
		d.BloomFilter = pb.BloomType(x)
		return nil
	},
	"COMPRESSION": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		x, ok := pb.Compression_value["COMPRESSION_"+strings.ToUpper(v.Text())]
		if !ok {
			return usage("COMPRESSION must be NONE, SNAPPY, LZ4, ZSTD or GZ")
		}
		d.Compression = pb.Compression(x)
		return nil
	},
	"DATA_BLOCK_ENCODING": func(d *pb.ColumnFamilyDescriptor, v Value) error {
		x, ok := pb.DataBlockEncoding_value["DATA_BLOCK_ENCODING_"+strings.ToUpper(v.Text())]
		if !ok {
			return usage("DATA_BLOCK_ENCODING must be NONE, PREFIX, DIFF or ROW_INDEX_V1")
		}
		d.DataBlockEncoding = pb.DataBlockEncoding(x)
		return nil
	},
}

func familyOf(h Value, d *pb.ColumnFamilyDescriptor) error {
	for _, k := range h.Keys {
		if k == "NAME" || k == "METHOD" {
			continue
		}
		set, ok := families[k]
		if !ok {
			return usage("unknown family attribute %s", k)
		}
		if err := set(d, h.Map[k]); err != nil {
			return err
		}
	}
	return nil
}

// namedTableAttributes are the descriptor attributes that create and alter take, and describe
// lists, under their own names (the others are free-form: METADATA).
var namedTableAttributes = []string{"NORMALIZATION_ENABLED", "NORMALIZER_TARGET_REGION_COUNT", "NORMALIZER_TARGET_REGION_SIZE_MB",
	region.SplitPolicyAttribute, region.FlushPolicyAttribute}

// tableAttribute sets a table attribute of create or alter, as HBase's shell names them; it
// reports false for a key it does not know. An empty string removes a free-form attribute.
func tableAttribute(td *pb.TableDescriptor, k string, v Value) (bool, error) {
	var err error
	setAttr := func(k, v string) {
		if td.Attributes == nil {
			td.Attributes = map[string]string{}
		}
		if v == "" {
			delete(td.Attributes, k)
		} else {
			td.Attributes[k] = v
		}
	}
	switch k {
	case "REGION_REPLICATION":
		td.RegionReplication, err = int32Of(v, k)
	case "MAX_FILESIZE":
		td.MaxFileSize, err = intOf(v, k)
	case "MEMSTORE_FLUSHSIZE":
		td.MemstoreFlushSize, err = intOf(v, k)
	case "METADATA", "CONFIGURATION":
		// Free-form table values (HBase keeps CONFIGURATION apart; here both are attributes).
		if v.Kind != Hash {
			return true, usage("%s must be a {KEY => value} hash", k)
		}
		for i, mk := range v.Keys {
			setAttr(v.RawKeys[i], v.Map[mk].Text()) // keys as written: they are not constants
		}
	default:
		if !slices.Contains(namedTableAttributes, k) {
			return false, nil
		}
		setAttr(k, v.Text())
	}
	return true, err
}

func (s *Shell) create(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	td := &pb.TableDescriptor{Name: client.ParseTableName(t)}
	req := &pb.CreateTableRequest{Table: td}
	for i, a := range args[1:] {
		switch a.Kind {
		case String, Const:
			td.Families = append(td.Families, &pb.ColumnFamilyDescriptor{Name: []byte(a.Str)})
		case Hash:
			if name, ok := a.Map["NAME"]; ok {
				fd := &pb.ColumnFamilyDescriptor{Name: []byte(name.Text())}
				if err := familyOf(a, fd); err != nil {
					return err
				}
				td.Families = append(td.Families, fd)
				continue
			}
			for _, k := range a.Keys {
				v := a.Map[k]
				switch k {
				case "SPLITS":
					if v.Kind != Array {
						return usage("SPLITS must be an array of row keys")
					}
					for _, it := range v.Items {
						req.SplitKeys = append(req.SplitKeys, ParseBinary(it.Text()))
					}
				case "NUMREGIONS":
					n, err := int32Of(v, k)
					if err != nil {
						return err
					}
					req.NumRegions = n
				case "SPLITALGO":
					// Regions are spread evenly over the byte space whatever the algorithm.
				default:
					if ok, err := tableAttribute(td, k, v); err != nil {
						return err
					} else if !ok {
						return usage("argument %d: unknown table attribute %s", i+2, k)
					}
				}
			}
		default:
			return usage("argument %d: want a family name or a {KEY => value} hash", i+2)
		}
	}
	if len(td.Families) == 0 {
		return usage("a table needs at least one column family")
	}
	if err := schema.UserTable(td.Name); err != nil {
		return usage("%v", err)
	}
	if err := schema.Descriptor(td); err != nil {
		return usage("%v", err)
	}
	err = s.Client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.CreateTable(ctx, req)
		return err
	})
	if err == nil {
		fmt.Fprintf(s.Out, "Created table %s\n", t)
	}
	return err
}

func (s *Shell) alter(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	// The changes apply to the descriptor as the master has it when they land: described again
	// if another alter landed in between.
	return s.Client.AlterTable(ctx, t, func(td *pb.TableDescriptor) error { return alterDescriptor(t, td, args[1:]) })
}

// alterDescriptor applies alter's arguments to td.
func alterDescriptor(t string, td *pb.TableDescriptor, args []Value) error {
	for _, a := range args {
		if a.Kind == String {
			a = Value{Kind: Hash, Keys: []string{"NAME"}, Map: map[string]Value{"NAME": a}}
		}
		if a.Kind != Hash {
			return usage("alter takes hashes: {NAME => 'f', ...}")
		}
		if fn, ok := a.Map["FUNCTION"]; ok {
			if err := alterFunction(td, fn); err != nil {
				return err
			}
			continue
		}
		if strings.EqualFold(a.Map["METHOD"].Text(), "function_unset") {
			if err := unsetFunction(td, a.Map["NAME"].Text()); err != nil {
				return err
			}
			continue
		}
		if name, ok := a.Map["NAME"]; ok {
			var fd *pb.ColumnFamilyDescriptor
			idx := -1
			for i, f := range td.Families {
				if string(f.Name) == name.Text() {
					fd, idx = f, i
				}
			}
			if strings.EqualFold(a.Map["METHOD"].Text(), "delete") {
				if idx < 0 {
					return fmt.Errorf("table %s has no family %s", t, name.Text())
				}
				td.Families = append(td.Families[:idx], td.Families[idx+1:]...)
				continue
			}
			if fd == nil {
				fd = &pb.ColumnFamilyDescriptor{Name: []byte(name.Text())}
				td.Families = append(td.Families, fd)
			}
			if err := familyOf(a, fd); err != nil {
				return err
			}
			continue
		}
		for _, k := range a.Keys {
			if ok, err := tableAttribute(td, k, a.Map[k]); err != nil {
				return err
			} else if !ok {
				return usage("unknown table attribute %s", k)
			}
		}
	}
	if err := schema.Descriptor(td); err != nil {
		return usage("%v", err)
	}
	return nil
}

func tableOp(op string) func(*Shell, context.Context, []Value) error {
	return func(s *Shell, ctx context.Context, args []Value) error {
		t, err := str(args, 0, "table")
		if err != nil {
			return err
		}
		tn := client.ParseTableName(t)
		return s.Client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			switch op {
			case "disable":
				_, err = m.DisableTable(ctx, &pb.TableRequest{Table: tn})
			case "enable":
				_, err = m.EnableTable(ctx, &pb.TableRequest{Table: tn})
			case "drop":
				_, err = m.DeleteTable(ctx, &pb.TableRequest{Table: tn})
			case "truncate":
				_, err = m.TruncateTable(ctx, &pb.TruncateTableRequest{Table: tn, PreserveSplits: true})
			}
			return err
		})
	}
}

func (s *Shell) list(ctx context.Context, args []Value) error {
	pattern := ""
	if len(args) > 0 {
		pattern = args[0].Text()
	}
	var resp *pb.ListTablesResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.ListTables(ctx, &pb.ListTablesRequest{Pattern: pattern})
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintln(s.Out, "TABLE")
	for _, t := range resp.Tables {
		state := ""
		if t.State != pb.TableState_TABLE_STATE_ENABLED {
			state = " (" + strings.TrimPrefix(t.State.String(), "TABLE_STATE_") + ")"
		}
		fmt.Fprintf(s.Out, "%s%s\n", tableName(t.Table.GetName()), state)
	}
	fmt.Fprintf(s.Out, "%d row(s)\n", len(resp.Tables))
	return nil
}

func tableName(tn *pb.TableName) string {
	if tn.GetNamespace() == "" || tn.GetNamespace() == "default" {
		return tn.GetName()
	}
	return tn.GetNamespace() + ":" + tn.GetName()
}

// describeTableAttributes lists a table's attributes as HBase's describe does: the settings it
// knows first, the free-form values in METADATA.
func describeTableAttributes(td *pb.TableDescriptor) string {
	parts := []string{fmt.Sprintf("REGION_REPLICATION => '%d'", max(td.RegionReplication, 1))}
	if td.MaxFileSize > 0 {
		parts = append(parts, fmt.Sprintf("MAX_FILESIZE => '%d'", td.MaxFileSize))
	}
	if td.MemstoreFlushSize > 0 {
		parts = append(parts, fmt.Sprintf("MEMSTORE_FLUSHSIZE => '%d'", td.MemstoreFlushSize))
	}
	keys := make([]string, 0, len(td.Attributes))
	for k := range td.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var meta []string
	for _, k := range keys {
		if slices.Contains(namedTableAttributes, k) {
			parts = append(parts, fmt.Sprintf("%s => '%s'", k, Text(td.Attributes[k])))
		} else {
			meta = append(meta, fmt.Sprintf("'%s' => '%s'", Text(k), Text(td.Attributes[k])))
		}
	}
	if len(meta) > 0 {
		parts = append(parts, "METADATA => {"+strings.Join(meta, ", ")+"}")
	}
	return strings.Join(parts, ", ")
}

func (s *Shell) describe(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	var resp *pb.DescribeTableResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err = m.DescribeTable(ctx, &pb.TableRequest{Table: client.ParseTableName(t)})
		return err
	}); err != nil {
		return err
	}
	td := resp.Table
	fmt.Fprintf(s.Out, "Table %s is %s\n", t, strings.TrimPrefix(resp.State.String(), "TABLE_STATE_"))
	fmt.Fprintf(s.Out, "%s, {TABLE_ATTRIBUTES => {%s}}\n", t, describeTableAttributes(td))
	fmt.Fprintln(s.Out, "COLUMN FAMILIES DESCRIPTION")
	for _, f := range td.Families {
		ttl := "'FOREVER'"
		if f.TtlSeconds > 0 {
			ttl = fmt.Sprintf("'%d SECONDS'", f.TtlSeconds)
		}
		bs := f.BlockSize
		if bs == 0 {
			bs = 65536
		}
		fmt.Fprintf(s.Out, "{NAME => '%s', VERSIONS => '%d', MIN_VERSIONS => '%d', TTL => %s, KEEP_DELETED_CELLS => '%s', "+
			"BLOOMFILTER => '%s', BLOCKSIZE => '%d', COMPRESSION => '%s', DATA_BLOCK_ENCODING => '%s', IN_MEMORY => '%v', BLOCKCACHE => '%v', IN_MEMORY_COMPACTION => '%s'}\n",
			Binary(f.Name), max(f.MaxVersions, 1), f.MinVersions, ttl,
			strings.TrimPrefix(f.KeepDeletedCells.String(), "KEEP_DELETED_CELLS_"),
			strings.TrimPrefix(f.BloomFilter.String(), "BLOOM_TYPE_"), bs,
			strings.TrimPrefix(f.Compression.String(), "COMPRESSION_"),
			strings.TrimPrefix(f.DataBlockEncoding.String(), "DATA_BLOCK_ENCODING_"),
			f.InMemory, !f.BlockCacheDisabled, strings.TrimPrefix(f.InMemoryCompaction.String(), "IN_MEMORY_COMPACTION_"))
	}
	fmt.Fprintf(s.Out, "%d row(s)\n", len(td.Families))
	for _, f := range td.Functions {
		fmt.Fprintf(s.Out, "FUNCTION => {NAME => '%s', SHA256 => '%x', SIZE => '%d', MEMORY_MB => '%d', TIMEOUT_MS => '%d', MAX_FAILURES => '%d'",
			Text(f.Name), f.Sha256, f.Size, f.MemoryMb, f.TimeoutMs, f.MaxFailures)
		if len(f.Args) > 0 {
			keys := make([]string, 0, len(f.Args))
			for k := range f.Args {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = fmt.Sprintf("'%s' => '%s'", Text(k), Text(f.Args[k]))
			}
			fmt.Fprintf(s.Out, ", ARGS => {%s}", strings.Join(parts, ", "))
		}
		fmt.Fprintln(s.Out, "}")
	}
	return nil
}

func (s *Shell) move(ctx context.Context, args []Value) error {
	region, err := str(args, 0, "region")
	if err != nil {
		return err
	}
	dest := ""
	if len(args) > 1 {
		dest = args[1].Text()
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: region, Destination: dest})
		return err
	})
}

func (s *Shell) split(ctx context.Context, args []Value) error {
	target, err := str(args, 0, "table or region")
	if err != nil {
		return err
	}
	var key []byte
	if len(args) > 1 {
		k, err := str(args, 1, "split key")
		if err != nil {
			return err
		}
		key = []byte(k)
	}
	var regions []string
	if isRegionName(target) {
		regions = []string{target}
	} else {
		var resp *pb.GetTableRegionsResponse
		if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			resp, err = m.GetTableRegions(ctx, &pb.TableRequest{Table: client.ParseTableName(target)})
			return err
		}); err != nil {
			return err
		}
		for _, l := range resp.Locations {
			ri := l.GetRegion()
			if ri.GetReplicaId() != 0 {
				continue
			}
			if key != nil && (bytes.Compare(key, ri.GetStartKey()) < 0 || len(ri.GetEndKey()) > 0 && bytes.Compare(key, ri.GetEndKey()) >= 0) {
				continue
			}
			regions = append(regions, ri.GetName())
		}
	}
	for _, name := range regions {
		if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.SplitRegion(ctx, &pb.SplitRegionRequest{Region: name, SplitKey: key})
			return err
		}); err != nil {
			if len(regions) == 1 {
				return err
			}
			fmt.Fprintf(s.Out, "region %s not split: %v\n", name, err)
			continue
		}
		fmt.Fprintf(s.Out, "split region %s\n", name)
	}
	return nil
}

// mergeRegion merges two adjacent regions: merge_region 'A', 'B' or merge_region ['A', 'B'] (HBase
// 2's forms; its third argument, force, would merge regions that do not touch, which Cellstore
// refuses).
func (s *Shell) mergeRegion(ctx context.Context, args []Value) error {
	var names []string
	switch {
	case len(args) >= 1 && args[0].Kind == Array:
		for _, it := range args[0].Items {
			names = append(names, it.Text())
		}
		args = args[1:]
	default:
		for len(args) > 0 && args[0].Kind == String {
			names = append(names, args[0].Str)
			args = args[1:]
		}
	}
	if len(args) > 0 && args[0].Kind == Const && args[0].Str == "true" {
		return fmt.Errorf("merge_region: forced merges of regions that do not touch are not supported: name two neighbouring regions (list_regions 't' shows them in key order)")
	}
	if len(args) > 0 || len(names) != 2 {
		return fmt.Errorf("merge_region takes two region names ('A', 'B' or ['A', 'B']); got %d", len(names))
	}
	var merged string
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.MergeRegions(ctx, &pb.MergeRegionsRequest{Regions: names})
		merged = resp.GetMerged()
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "merged regions %s and %s into %s\n", names[0], names[1], merged)
	return nil
}

// updateConfig asks one process to re-read its configuration file: update_config 'host:port'
// (HBase's "host,port,startcode" is accepted too).
func (s *Shell) updateConfig(ctx context.Context, args []Value) error {
	server, err := str(args, 0, "server (host:port)")
	if err != nil {
		return err
	}
	if host, rest, ok := strings.Cut(server, ","); ok {
		port, _, _ := strings.Cut(rest, ",")
		server = net.JoinHostPort(host, port)
	}
	return s.reloadConfig(ctx, &pb.UpdateClusterConfigurationRequest{Server: server})
}

func (s *Shell) updateAllConfig(ctx context.Context, _ []Value) error {
	return s.reloadConfig(ctx, &pb.UpdateClusterConfigurationRequest{All: true})
}

// reloadConfig prints what each process did with its configuration file.
func (s *Shell) reloadConfig(ctx context.Context, req *pb.UpdateClusterConfigurationRequest) error {
	var resp *pb.UpdateClusterConfigurationResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.UpdateConfiguration(ctx, req)
		return err
	}); err != nil {
		return err
	}
	for _, r := range resp.GetReports() {
		switch {
		case r.GetError() != "":
			fmt.Fprintf(s.Out, "%s: %s\n", r.GetProcess(), r.GetError())
		case len(r.GetApplied()) == 0 && len(r.GetNeedsRestart()) == 0:
			fmt.Fprintf(s.Out, "%s: no change\n", r.GetProcess())
		}
		for _, a := range r.GetApplied() {
			fmt.Fprintf(s.Out, "%s: applied %s\n", r.GetProcess(), a)
		}
		if len(r.GetNeedsRestart()) > 0 {
			fmt.Fprintf(s.Out, "%s: changed, takes effect at the next restart: %s\n", r.GetProcess(), strings.Join(r.GetNeedsRestart(), ", "))
		}
	}
	return nil
}

// isRegionName: 16 hex digits (a primary's name as the master assigns it).
func isRegionName(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func (s *Shell) balancer(ctx context.Context, _ []Value) error {
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.Balance(ctx, &pb.BalanceRequest{})
		if err == nil {
			fmt.Fprintf(s.Out, "true (%d region moves)\n", resp.Moves)
		}
		return err
	})
}

func (s *Shell) drain(ctx context.Context, args []Value) error {
	server, err := str(args, 0, "server (host:port)")
	if err != nil {
		return err
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		if _, err := m.DrainServer(ctx, &pb.DrainServerRequest{Server: server}); err != nil {
			return err
		}
		fmt.Fprintf(s.Out, "%s is draining: its regions move to other servers; undrain '%s' reverses it\n", server, server)
		return nil
	})
}

func (s *Shell) undrain(ctx context.Context, args []Value) error {
	server, err := str(args, 0, "server (host:port)")
	if err != nil {
		return err
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		if _, err := m.UndrainServer(ctx, &pb.DrainServerRequest{Server: server}); err != nil {
			return err
		}
		fmt.Fprintf(s.Out, "%s takes regions again\n", server)
		return nil
	})
}

func (s *Shell) balanceSwitch(ctx context.Context, args []Value) error {
	return s.flipSwitch(ctx, args, "balance_switch", "balancer", pb.MasterClient.SetBalancerRunning)
}

// flipSwitch runs one of the master's on/off switches (balance_switch, normalizer_switch) and
// prints its previous state as HBase's shell does.
func (s *Shell) flipSwitch(ctx context.Context, args []Value, verb, what string,
	set func(pb.MasterClient, context.Context, *pb.SetBalancerRunningRequest, ...grpc.CallOption) (*pb.SetBalancerRunningResponse, error)) error {
	if len(args) != 1 {
		return usage("%s takes true or false", verb)
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := set(m, ctx, &pb.SetBalancerRunningRequest{On: boolOf(args[0])})
		if err == nil {
			fmt.Fprintf(s.Out, "Previous %s state : %v\n", what, resp.Previous)
		}
		return err
	})
}

// normalize runs the region normalizer now: on the tables that set NORMALIZATION_ENABLED, or on
// the one named.
func (s *Shell) normalize(ctx context.Context, args []Value) error {
	req := &pb.NormalizeRequest{}
	if len(args) > 0 {
		t, err := str(args, 0, "table")
		if err != nil {
			return err
		}
		req.Tables = []*pb.TableName{client.ParseTableName(t)}
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.Normalize(ctx, req)
		if err == nil {
			fmt.Fprintf(s.Out, "normalizer ran: %d split(s) and %d merge(s) started\n", resp.GetSplits(), resp.GetMerges())
		}
		return err
	})
}

func (s *Shell) normalizerSwitch(ctx context.Context, args []Value) error {
	return s.flipSwitch(ctx, args, "normalizer_switch", "normalizer", pb.MasterClient.SetNormalizerRunning)
}

func (s *Shell) normalizerEnabled(ctx context.Context, _ []Value) error {
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		st, err := m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		if err == nil {
			fmt.Fprintf(s.Out, "%v\n", st.GetNormalizerOn())
		}
		return err
	})
}

func (s *Shell) status(ctx context.Context, args []Value) error {
	var st *pb.ClusterStatusResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		st, err = m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		return err
	}); err != nil {
		return err
	}
	live := 0
	for _, sv := range st.Servers {
		if sv.Live {
			live++
		}
	}
	failed, draining := 0, 0
	for _, r := range st.RegionsInTransition {
		if r.State == pb.RegionState_REGION_STATE_FAILED_OPEN {
			failed++
		}
	}
	for _, sv := range st.Servers {
		if sv.Draining {
			draining++
		}
	}
	fmt.Fprintf(s.Out, "1 active master, %d backup masters, %d servers (%d draining), %d dead, %d regions, %d in transition (%d failed to open)\n",
		len(st.StandbyMasters), live, draining, len(st.DeadServers), st.Regions, len(st.RegionsInTransition), failed)
	if len(args) > 0 && strings.EqualFold(args[0].Text(), "simple") || len(args) > 0 && strings.EqualFold(args[0].Text(), "detailed") {
		fmt.Fprintf(s.Out, "active master: %s%s\n", st.ActiveMaster, versionNote(st.MasterVersions[st.ActiveMaster]))
		for _, b := range st.StandbyMasters {
			fmt.Fprintf(s.Out, "backup master: %s%s\n", b, versionNote(st.MasterVersions[b]))
		}
		for _, sv := range st.Servers {
			flags := ""
			if sv.Draining {
				flags += " draining"
			}
			if !sv.Live {
				flags += " dead"
			}
			fmt.Fprintf(s.Out, "    %s zone=%s regions=%d%s%s\n", sv.Server.Address(), sv.Zone, sv.Regions, versionNote(sv.Version), flags)
		}
		for _, r := range st.RegionsInTransition {
			fmt.Fprintf(s.Out, "    in transition: %s %s on %s for %d ms\n", r.Region, strings.TrimPrefix(r.State.String(), "REGION_STATE_"), r.Server, r.SinceMsAgo)
		}
	}
	return nil
}

// versionNote is " version=V", or nothing for a process that did not say.
func versionNote(v string) string {
	if v == "" {
		return ""
	}
	return " version=" + v
}

func (s *Shell) listRegions(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	var resp *pb.GetTableRegionsResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		resp, err = m.GetTableRegions(ctx, &pb.TableRequest{Table: client.ParseTableName(t)})
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "%-20s %-7s %-40s %-12s %s\n", "REGION", "REPLICA", "SERVER", "STATE", "START_KEY END_KEY")
	for _, l := range resp.Locations {
		server := l.GetServer().Address()
		if server == "" {
			server = "-"
		}
		fmt.Fprintf(s.Out, "%-20s %-7d %-40s %-12s %q %q\n", l.GetRegion().GetName(), l.GetRegion().GetReplicaId(), server,
			strings.TrimPrefix(l.GetState().String(), "REGION_STATE_"), l.GetRegion().GetStartKey(), l.GetRegion().GetEndKey())
	}
	fmt.Fprintf(s.Out, "%d row(s)\n", len(resp.Locations))
	return nil
}

func (s *Shell) setQuota(ctx context.Context, args []Value) error {
	h, err := optHash(args, 0)
	if err != nil || len(args) != 1 {
		return usage("set_quota takes TYPE => THROTTLE, a USER, TABLE or NAMESPACE, and a LIMIT")
	}
	if !strings.EqualFold(h.Map["TYPE"].Text(), "THROTTLE") {
		return usage("only TYPE => THROTTLE quotas exist")
	}
	q := &pb.Quota{}
	if h.Map["USER"].Text() != "" && (h.Map["TABLE"].Text() != "" || h.Map["NAMESPACE"].Text() != "") {
		// HBase's quota of a user on a table or namespace: Cellstore's quotas have one subject,
		// and taking the user alone would throttle them everywhere.
		return usage("set_quota takes one of USER, TABLE or NAMESPACE: a user's quota on one table or namespace is not supported")
	}
	if h.Map["TABLE"].Text() != "" && h.Map["NAMESPACE"].Text() != "" {
		return usage("set_quota takes one of USER, TABLE or NAMESPACE")
	}
	switch {
	case h.Map["USER"].Text() != "":
		q.Subject = &pb.Quota_User{User: h.Map["USER"].Text()}
	case h.Map["TABLE"].Text() != "":
		q.Subject = &pb.Quota_Table{Table: client.ParseTableName(h.Map["TABLE"].Text())}
	case h.Map["NAMESPACE"].Text() != "":
		q.Subject = &pb.Quota_Namespace{Namespace: h.Map["NAMESPACE"].Text()}
	default:
		return usage("set_quota needs USER, TABLE or NAMESPACE")
	}
	req := &pb.SetQuotaRequest{Quota: q}
	throttleType := h.Map["THROTTLE_TYPE"].Text()
	lim, err := quota.ParseLimit(h.Map["LIMIT"].Text())
	switch {
	case errors.Is(err, quota.ErrNoLimit):
		// LIMIT => NONE removes the subject's throttles: all of them, or those of THROTTLE_TYPE.
		req.Remove = true
		for _, unit := range []quota.Unit{quota.Requests, quota.Bytes} {
			types := []string{throttleType}
			if throttleType == "" {
				types = []string{"", "READ", "WRITE"}
			}
			for _, t := range types {
				tt, err := quota.ThrottleType(t, quota.Limit{Unit: unit})
				if err != nil {
					return err
				}
				req.RemoveTypes = append(req.RemoveTypes, tt)
			}
		}
		q.Type = req.RemoveTypes[0]
	case err != nil:
		return err
	default:
		tt, err := quota.ThrottleType(throttleType, lim)
		if err != nil {
			return err
		}
		p := quota.ToProto(lim, tt)
		q.Type, q.Limit, q.TimeUnitSeconds = p.Type, p.Limit, p.TimeUnitSeconds
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetQuota(ctx, req)
		return err
	})
}

func (s *Shell) listQuotas(ctx context.Context, _ []Value) error {
	var resp *pb.ListQuotasResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.ListQuotas(ctx, &pb.ListQuotasRequest{})
		return err
	}); err != nil {
		return err
	}
	tb := newTable(s.Out, "OWNER", "QUOTAS")
	for _, q := range resp.Quotas {
		owner := ""
		switch sub := q.Subject.(type) {
		case *pb.Quota_User:
			owner = "USER => " + sub.User
		case *pb.Quota_Table:
			owner = "TABLE => " + tableName(sub.Table)
		case *pb.Quota_Namespace:
			owner = "NAMESPACE => " + sub.Namespace
		}
		lim, err := quota.FromProto(q)
		limit := "?"
		if err == nil {
			limit = lim.String()
		}
		tb.row(owner, fmt.Sprintf("TYPE => THROTTLE, THROTTLE_TYPE => %s, LIMIT => %s", strings.TrimPrefix(q.Type.String(), "THROTTLE_TYPE_"), limit))
	}
	tb.done()
	fmt.Fprintf(s.Out, "%d row(s)\n", len(resp.Quotas))
	return nil
}
