// Cellstore's HBase wire-compatibility program: the stock HBase Java client, configured only with
// the RPC connection registry and bootstrap servers, runs the steps named on the command line
// against a Cellstore server and prints "ok <step>" after each (anything else fails the run);
// lines that begin with "info " say what a step measured (the Go test logs them).
//
//   java -cp <hbase client jars>:. HBaseCompat host:port step...
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.ArrayBackedTag;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.HConstants;
import org.apache.hadoop.hbase.KeyValue;
import org.apache.hadoop.hbase.Tag;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.CompareOperator;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.Append;
import org.apache.hadoop.hbase.client.BufferedMutator;
import org.apache.hadoop.hbase.client.CheckAndMutate;
import org.apache.hadoop.hbase.client.CheckAndMutateResult;
import org.apache.hadoop.hbase.client.Consistency;
import org.apache.hadoop.hbase.client.Increment;
import org.apache.hadoop.hbase.client.Row;
import org.apache.hadoop.hbase.client.RowMutations;
import org.apache.hadoop.hbase.filter.BinaryComparator;
import org.apache.hadoop.hbase.filter.ColumnPrefixFilter;
import org.apache.hadoop.hbase.filter.FilterList;
import org.apache.hadoop.hbase.filter.FirstKeyOnlyFilter;
import org.apache.hadoop.hbase.filter.FuzzyRowFilter;
import org.apache.hadoop.hbase.filter.KeyOnlyFilter;
import org.apache.hadoop.hbase.filter.PageFilter;
import org.apache.hadoop.hbase.filter.PrefixFilter;
import org.apache.hadoop.hbase.filter.QualifierFilter;
import org.apache.hadoop.hbase.filter.RowFilter;
import org.apache.hadoop.hbase.filter.SingleColumnValueFilter;
import org.apache.hadoop.hbase.filter.SubstringComparator;
import org.apache.hadoop.hbase.filter.TimestampsFilter;
import org.apache.hadoop.hbase.filter.ValueFilter;
import org.apache.hadoop.hbase.filter.WhileMatchFilter;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Delete;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.RegionLocator;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.SnapshotDescription;
import org.apache.hadoop.hbase.snapshot.SnapshotExistsException;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptor;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.util.Bytes;

public class HBaseCompat {
  static final byte[] F = Bytes.toBytes("f");

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  static byte[] b(String s) {
    return Bytes.toBytes(s);
  }

  // configure sets what the client needs to reach Cellstore (HBaseTool.clientSettings).
  static void configure(Configuration conf, String bootstrapServers) throws Exception {
    for (java.util.Map.Entry<String, String> e : HBaseTool.clientSettings(bootstrapServers).entrySet()) {
      conf.set(e.getKey(), e.getValue());
    }
  }

  interface Op {
    void run() throws Exception;
  }

  // refused checks that op fails with HBase's AccessDeniedException (anywhere in its causes).
  static void refused(String what, Op op) throws Exception {
    try {
      op.run();
    } catch (Exception e) {
      for (Throwable c = e; c != null; c = c.getCause()) {
        if (c instanceof org.apache.hadoop.hbase.security.AccessDeniedException) {
          return;
        }
      }
      if (e instanceof org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException) {
        org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException r =
            (org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException) e;
        boolean all = r.getNumExceptions() > 0;
        for (int i = 0; i < r.getNumExceptions(); i++) {
          all &= r.getCause(i) instanceof org.apache.hadoop.hbase.security.AccessDeniedException;
        }
        if (all) {
          return;
        }
      }
      throw new AssertionError(what + ": refused, but not as access denied", e);
    }
    throw new AssertionError(what + ": allowed, but the user holds no permission for it");
  }

  public static void main(String[] args) throws Exception {
    Configuration conf = HBaseConfiguration.create();
    configure(conf, args[0]);
    conf.setInt("hbase.client.retries.number", 10);
    conf.setInt("hbase.client.operation.timeout", 60000);
    TableName tn = TableName.valueOf("compat");
    try (Connection conn = ConnectionFactory.createConnection(conf)) {
      for (String step : Arrays.copyOfRange(args, 1, args.length)) {
        try {
          run(conn, tn, step);
        } catch (org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException e) {
          for (int i = 0; i < e.getNumExceptions(); i++) {
            System.out.println("cause " + i + ": " + e.getCause(i));
          }
          throw e;
        }
        System.out.println("ok " + step);
      }
    }
  }

  static int count(Table t, Scan scan) throws Exception {
    int n = 0;
    try (ResultScanner s = t.getScanner(scan)) {
      for (Result r : s) {
        n++;
      }
    }
    return n;
  }

  static void run(Connection conn, TableName tn, String step) throws Exception {
    switch (step) {
      case "create": {
        try (Admin admin = conn.getAdmin()) {
          if (admin.tableExists(tn)) {
            if (admin.isTableEnabled(tn)) {
              admin.disableTable(tn);
            }
            admin.deleteTable(tn);
          }
          TableDescriptor td = TableDescriptorBuilder.newBuilder(tn)
              .setColumnFamily(ColumnFamilyDescriptorBuilder.newBuilder(F).setMaxVersions(3).build()).build();
          admin.createTable(td, new byte[][] {b("row-3"), b("row-6")});
          check(admin.tableExists(tn), "the table exists after create");
          TableDescriptor got = admin.getDescriptor(tn);
          check(got.getColumnFamily(F) != null && got.getColumnFamily(F).getMaxVersions() == 3,
              "describe: family f with 3 versions, got " + got);
          check(admin.getRegions(tn).size() == 3, "3 regions, got " + admin.getRegions(tn).size());
        }
        break;
      }
      case "putget": {
        try (Table t = conn.getTable(tn)) {
          for (int i = 0; i < 9; i++) {
            t.put(new Put(b("row-" + i)).addColumn(F, b("q"), b("v" + i)));
          }
          for (int i = 0; i < 9; i++) {
            Result r = t.get(new Get(b("row-" + i)));
            check(Bytes.toString(r.getValue(F, b("q"))).equals("v" + i), "get row-" + i + ": " + r);
          }
          check(t.get(new Get(b("nope"))).isEmpty(), "a missing row is empty");
          // Versions and timestamps.
          t.put(new Put(b("ver")).addColumn(F, b("q"), 10, b("a")));
          t.put(new Put(b("ver")).addColumn(F, b("q"), 20, b("b")));
          Result r = t.get(new Get(b("ver")).readVersions(3));
          List<Cell> cells = r.getColumnCells(F, b("q"));
          check(cells.size() == 2 && cells.get(0).getTimestamp() == 20 && Bytes.toString(CellUtil.cloneValue(cells.get(1))).equals("a"),
              "two versions, newest first: " + cells);
          t.delete(new Delete(b("ver")).addColumn(F, b("q"), 20));
          check(Bytes.toString(t.get(new Get(b("ver"))).getValue(F, b("q"))).equals("a"), "the older version after deleting the newer");
          t.delete(new Delete(b("ver")));
          check(t.get(new Get(b("ver"))).isEmpty(), "the row is gone after deleteall");
        }
        break;
      }
      case "scan": {
        try (Table t = conn.getTable(tn)) {
          List<String> rows = new ArrayList<>();
          try (ResultScanner s = t.getScanner(new Scan().setCaching(2))) {
            for (Result r : s) {
              rows.add(Bytes.toString(r.getRow()));
            }
          }
          check(rows.size() == 9 && rows.get(0).equals("row-0") && rows.get(8).equals("row-8"), "a full scan over 3 regions: " + rows);
          rows.clear();
          try (ResultScanner s = t.getScanner(new Scan().withStartRow(b("row-2")).withStopRow(b("row-7")))) {
            for (Result r : s) {
              rows.add(Bytes.toString(r.getRow()));
            }
          }
          check(rows.equals(Arrays.asList("row-2", "row-3", "row-4", "row-5", "row-6")), "start/stop: " + rows);
          rows.clear();
          try (ResultScanner s = t.getScanner(new Scan().setReversed(true).withStartRow(b("row-5")))) {
            for (Result r : s) {
              rows.add(Bytes.toString(r.getRow()));
            }
          }
          check(rows.equals(Arrays.asList("row-5", "row-4", "row-3", "row-2", "row-1", "row-0")), "reversed: " + rows);
        }
        break;
      }
      case "batch": {
        // 10,000 puts in one batch call, then 10,000 more through a BufferedMutator.
        try (Table t = conn.getTable(tn)) {
          List<Put> puts = new ArrayList<>();
          for (int i = 0; i < 10000; i++) {
            puts.add(new Put(b(String.format("b%05d", i))).addColumn(F, b("n"), Bytes.toBytes(i)));
          }
          t.put(puts);
          try (BufferedMutator bm = conn.getBufferedMutator(tn)) {
            for (int i = 0; i < 10000; i++) {
              bm.mutate(new Put(b(String.format("m%05d", i))).addColumn(F, b("n"), Bytes.toBytes(i)));
            }
          }
          check(count(t, new Scan().withStartRow(b("b")).withStopRow(b("c")).setCaching(1000)) == 10000, "10,000 rows from the batch");
          check(count(t, new Scan().withStartRow(b("m")).withStopRow(b("n")).setCaching(500)) == 10000, "10,000 rows from the buffered mutator");
          List<Get> gets = new ArrayList<>();
          for (int i = 0; i < 100; i++) {
            gets.add(new Get(b(String.format("b%05d", i * 97))));
          }
          Result[] rs = t.get(gets);
          for (int i = 0; i < 100; i++) {
            check(Bytes.toInt(rs[i].getValue(F, b("n"))) == i * 97, "multi-get " + i);
          }
          List<Row> mixed = new ArrayList<>();
          mixed.add(new Delete(b("b00000")));
          mixed.add(new Get(b("b00001")));
          Object[] results = new Object[2];
          t.batch(mixed, results);
          check(t.get(new Get(b("b00000"))).isEmpty() && ((Result) results[1]).getValue(F, b("n")) != null, "a mixed batch");
          check(t.exists(new Get(b("b00002"))) && !t.exists(new Get(b("b00000"))), "exists");
        }
        break;
      }
      case "limits": {
        try (Table t = conn.getTable(tn)) {
          Put wide = new Put(b("wide"));
          for (int i = 0; i < 50; i++) {
            wide.addColumn(F, b(String.format("c%02d", i)), new byte[1000]);
          }
          t.put(wide);
          // Partial results: a row larger than the max result size comes in pieces.
          int cells = 0;
          int results = 0;
          try (ResultScanner s = t.getScanner(new Scan().withStartRow(b("wide")).withStopRow(b("wide"), true)
              .setMaxResultSize(8000).setAllowPartialResults(true))) {
            for (Result r : s) {
              cells += r.size();
              results++;
            }
          }
          check(cells == 50 && results > 1, "partial results: " + cells + " cells in " + results + " results");
          // Without allowing partials, the client stitches them back into one row.
          try (ResultScanner s = t.getScanner(new Scan().withStartRow(b("wide")).withStopRow(b("wide"), true).setMaxResultSize(8000))) {
            Result r = s.next();
            check(r.size() == 50 && s.next() == null, "a whole row from partials: " + r.size());
          }
          // Batch: at most 20 cells per result.
          results = 0;
          try (ResultScanner s = t.getScanner(new Scan().withStartRow(b("wide")).withStopRow(b("wide"), true).setBatch(20))) {
            for (Result r : s) {
              check(r.size() <= 20, "batch of at most 20, got " + r.size());
              results++;
            }
          }
          check(results == 3, "50 cells in batches of 20: 3 results, got " + results);
          check(count(t, new Scan().setLimit(5)) == 5, "a scan limited to 5 rows");
          Result r = t.get(new Get(b("row-1")).setConsistency(Consistency.TIMELINE));
          check(Bytes.toString(r.getValue(F, b("q"))).equals("v1"), "a TIMELINE get");
        }
        break;
      }
      case "filters": {
        try (Table t = conn.getTable(tn)) {
          check(count(t, new Scan().setFilter(new PrefixFilter(b("row-")))) == 9, "PrefixFilter");
          check(count(t, new Scan().setFilter(new RowFilter(CompareOperator.LESS, new BinaryComparator(b("row-3"))))) == 3
              + count(t, new Scan().withStopRow(b("row-0"))), "RowFilter");
          check(count(t, new Scan().withStartRow(b("row-")).withStopRow(b("row.")).setFilter(
              new ValueFilter(CompareOperator.EQUAL, new SubstringComparator("v4")))) == 1, "ValueFilter with SubstringComparator");
          SingleColumnValueFilter scvf = new SingleColumnValueFilter(F, b("q"), CompareOperator.EQUAL, b("v5"));
          scvf.setFilterIfMissing(true);
          check(count(t, new Scan().setFilter(scvf)) == 1, "SingleColumnValueFilter");
          check(count(t, new Scan().withStartRow(b("row-")).setFilter(new PageFilter(4))) >= 4, "PageFilter");
          FilterList all = new FilterList(FilterList.Operator.MUST_PASS_ALL, new PrefixFilter(b("row-")),
              new QualifierFilter(CompareOperator.EQUAL, new BinaryComparator(b("q"))));
          check(count(t, new Scan().setFilter(all)) == 9, "FilterList MUST_PASS_ALL");
          FilterList one = new FilterList(FilterList.Operator.MUST_PASS_ONE, new PrefixFilter(b("row-1")), new PrefixFilter(b("row-2")));
          check(count(t, new Scan().setFilter(one)) == 2, "FilterList MUST_PASS_ONE");
          check(count(t, new Scan().withStartRow(b("row-")).setFilter(new WhileMatchFilter(new PrefixFilter(b("row-0"))))) == 1, "WhileMatchFilter");
          try (ResultScanner s = t.getScanner(new Scan().withStartRow(b("wide")).withStopRow(b("wide"), true).setFilter(new FirstKeyOnlyFilter()))) {
            check(s.next().size() == 1, "FirstKeyOnlyFilter");
          }
          try (ResultScanner s = t.getScanner(new Scan().withStartRow(b("wide")).withStopRow(b("wide"), true).setFilter(
              new FilterList(new ColumnPrefixFilter(b("c1")), new KeyOnlyFilter())))) {
            Result r = s.next();
            check(r.size() == 10 && r.rawCells()[0].getValueLength() == 0, "ColumnPrefixFilter and KeyOnlyFilter: " + r.size());
          }
          t.put(new Put(b("ts")).addColumn(F, b("q"), 5, b("five")).addColumn(F, b("q"), 7, b("seven")));
          Result r = t.get(new Get(b("ts")).readAllVersions().setFilter(new TimestampsFilter(Arrays.asList(5L))));
          check(r.size() == 1 && Bytes.toString(r.value()).equals("five"), "TimestampsFilter");
          // A filter for an older version finds it with the default one version per column.
          r = t.get(new Get(b("ts")).setFilter(new TimestampsFilter(Arrays.asList(5L))));
          check(r.size() == 1 && Bytes.toString(r.value()).equals("five"), "TimestampsFilter of an older version: " + r);
          // FuzzyRowFilter as the client serializes it (a preprocessed mask): row-? with any last byte.
          check(count(t, new Scan().setFilter(new FuzzyRowFilter(Arrays.asList(
              new org.apache.hadoop.hbase.util.Pair<>(b("row-0"), new byte[] {0, 0, 0, 0, 1}))))) == 9, "FuzzyRowFilter");
          // RegexStringComparator's default DOTALL: '.' matches a newline.
          t.put(new Put(b("nl")).addColumn(F, b("q"), b("x\ny")));
          check(count(t, new Scan().withStartRow(b("nl")).withStopRow(b("nl"), true).setFilter(
              new ValueFilter(CompareOperator.EQUAL, new org.apache.hadoop.hbase.filter.RegexStringComparator("x.y")))) == 1, "RegexStringComparator with DOTALL");
        }
        break;
      }
      case "atomic": {
        try (Table t = conn.getTable(tn)) {
          t.increment(new Increment(b("ctr")).addColumn(F, b("n"), 5));
          Result r = t.increment(new Increment(b("ctr")).addColumn(F, b("n"), 2));
          check(Bytes.toLong(r.getValue(F, b("n"))) == 7, "increment: " + Bytes.toLong(r.getValue(F, b("n"))));
          check(t.incrementColumnValue(b("ctr"), F, b("n"), 3) == 10, "incrementColumnValue");
          Increment quiet = new Increment(b("ctr")).addColumn(F, b("n"), 1);
          quiet.setReturnResults(false);
          r = t.increment(quiet);
          check(r.isEmpty() && Bytes.toLong(t.get(new Get(b("ctr"))).getValue(F, b("n"))) == 11, "increment without results: " + r);
          // The result's cells in cell order, whatever the order of the columns (Result.getValue
          // searches them by bisection).
          r = t.increment(new Increment(b("ctr2")).addColumn(F, b("z"), 1).addColumn(F, b("a"), 2));
          check(r.getValue(F, b("a")) != null && Bytes.toLong(r.getValue(F, b("a"))) == 2
              && r.getValue(F, b("z")) != null && Bytes.toLong(r.getValue(F, b("z"))) == 1, "increment of two columns: " + r);
          // A row delete up to a timestamp.
          t.put(new Put(b("dts")).addColumn(F, b("q"), 50, b("old")).addColumn(F, b("q"), 150, b("new")));
          t.delete(new Delete(b("dts"), 100));
          r = t.get(new Get(b("dts")).readAllVersions());
          check(r.size() == 1 && Bytes.toString(r.getValue(F, b("q"))).equals("new"), "delete of a row up to a timestamp: " + r);
          // A check for an empty value holds on a cell holding one.
          t.put(new Put(b("ev")).addColumn(F, b("q"), new byte[0]));
          check(t.checkAndMutate(CheckAndMutate.newBuilder(b("ev")).ifEquals(F, b("q"), new byte[0])
              .build(new Put(b("ev")).addColumn(F, b("r"), b("1")))).isSuccess(), "checkAndMutate for an empty value");
          t.append(new Append(b("app")).addColumn(F, b("s"), b("ab")));
          r = t.append(new Append(b("app")).addColumn(F, b("s"), b("cd")));
          check(Bytes.toString(r.getValue(F, b("s"))).equals("abcd"), "append");
          CheckAndMutateResult cr = t.checkAndMutate(CheckAndMutate.newBuilder(b("row-1")).ifEquals(F, b("q"), b("v1"))
              .build(new Put(b("row-1")).addColumn(F, b("q"), b("v1b"))));
          check(cr.isSuccess(), "checkAndMutate that holds");
          cr = t.checkAndMutate(CheckAndMutate.newBuilder(b("row-1")).ifEquals(F, b("q"), b("v1"))
              .build(new Put(b("row-1")).addColumn(F, b("q"), b("never"))));
          check(!cr.isSuccess() && Bytes.toString(t.get(new Get(b("row-1"))).getValue(F, b("q"))).equals("v1b"), "checkAndMutate that fails");
          cr = t.checkAndMutate(CheckAndMutate.newBuilder(b("row-1")).ifNotExists(F, b("absent"))
              .build(new Delete(b("row-1")).addColumns(F, b("q"))));
          check(cr.isSuccess() && t.get(new Get(b("row-1"))).isEmpty(), "checkAndDelete if not exists");
          RowMutations rm = new RowMutations(b("rm"));
          rm.add(new Put(b("rm")).addColumn(F, b("a"), b("1")));
          rm.add(new Put(b("rm")).addColumn(F, b("b"), b("2")));
          t.mutateRow(rm);
          check(t.get(new Get(b("rm"))).size() == 2, "RowMutations");
          // RowMutations and CheckAndMutate (with a filter, of RowMutations; and one that fails)
          // inside a batch.
          t.put(new Put(b("brm2")).addColumn(F, b("a"), b("0")).addColumn(F, b("b"), b("2")));
          RowMutations brm = new RowMutations(b("brm"));
          brm.add(new Put(b("brm")).addColumn(F, b("a"), b("1")));
          brm.add(new Put(b("brm")).addColumn(F, b("b"), b("2")));
          RowMutations crm = new RowMutations(b("brm2"));
          crm.add(new Put(b("brm2")).addColumn(F, b("c"), b("3")));
          crm.add(new Delete(b("brm2")).addColumns(F, b("a")));
          List<Row> ops = new ArrayList<>();
          ops.add(new Put(b("bplain")).addColumn(F, b("q"), b("p")));
          ops.add(brm);
          ops.add(CheckAndMutate.newBuilder(b("brm2")).ifMatches(new SingleColumnValueFilter(F, b("b"), CompareOperator.EQUAL, b("2"))).build(crm));
          ops.add(CheckAndMutate.newBuilder(b("brm2")).ifEquals(F, b("b"), b("nope")).build(new Put(b("brm2")).addColumn(F, b("never"), b("x"))));
          Object[] res = new Object[ops.size()];
          t.batch(ops, res);
          check(res[2] instanceof CheckAndMutateResult && ((CheckAndMutateResult) res[2]).isSuccess(), "CheckAndMutate with a filter in a batch: " + res[2]);
          check(res[3] instanceof CheckAndMutateResult && !((CheckAndMutateResult) res[3]).isSuccess(), "failing CheckAndMutate in a batch: " + res[3]);
          Result brm2 = t.get(new Get(b("brm2")));
          check(t.get(new Get(b("brm"))).size() == 2 && t.get(new Get(b("bplain"))).size() == 1, "RowMutations in a batch");
          check(brm2.size() == 2 && brm2.getValue(F, b("a")) == null && brm2.getValue(F, b("never")) == null, "CheckAndMutate RowMutations in a batch: " + brm2);
          t.put(new Put(b("row-1")).addColumn(F, b("q"), b("v1")));
        }
        break;
      }
      case "alter": {
        try (Admin admin = conn.getAdmin()) {
          admin.addColumnFamily(tn, ColumnFamilyDescriptorBuilder.newBuilder(b("g")).setTimeToLive(3600).build());
          check(admin.getDescriptor(tn).getColumnFamily(b("g")).getTimeToLive() == 3600, "the added family");
          try (Table t = conn.getTable(tn)) {
            t.put(new Put(b("gg")).addColumn(b("g"), b("x"), b("y")));
            check(Bytes.toString(t.get(new Get(b("gg"))).getValue(b("g"), b("x"))).equals("y"), "a write to the new family");
          }
          admin.deleteColumnFamily(tn, b("g"));
          check(admin.getDescriptor(tn).getColumnFamily(b("g")) == null, "the family is gone");
          // Data block encodings: ROW_INDEX_V1 kept, FAST_DIFF stored (and described) as DIFF.
          admin.addColumnFamily(tn, ColumnFamilyDescriptorBuilder.newBuilder(b("ri"))
              .setDataBlockEncoding(org.apache.hadoop.hbase.io.encoding.DataBlockEncoding.ROW_INDEX_V1).build());
          admin.addColumnFamily(tn, ColumnFamilyDescriptorBuilder.newBuilder(b("fd"))
              .setDataBlockEncoding(org.apache.hadoop.hbase.io.encoding.DataBlockEncoding.FAST_DIFF).build());
          check(admin.getDescriptor(tn).getColumnFamily(b("ri")).getDataBlockEncoding().name().equals("ROW_INDEX_V1"), "ROW_INDEX_V1");
          check(admin.getDescriptor(tn).getColumnFamily(b("fd")).getDataBlockEncoding().name().equals("DIFF"), "FAST_DIFF as DIFF");
          admin.deleteColumnFamily(tn, b("ri"));
          admin.deleteColumnFamily(tn, b("fd"));
          check(admin.getRegionServers().size() >= 1, "getRegionServers: " + admin.getRegionServers());
          // The region normalizer: the table asks for it, the switch, a run now.
          admin.modifyTable(TableDescriptorBuilder.newBuilder(admin.getDescriptor(tn)).setNormalizationEnabled(true).build());
          check(admin.getDescriptor(tn).isNormalizationEnabled(), "NORMALIZATION_ENABLED kept");
          admin.normalizerSwitch(false);
          check(!admin.isNormalizerEnabled(), "normalizer switched off");
          check(!admin.normalizerSwitch(true), "normalizerSwitch answers the previous state");
          check(admin.isNormalizerEnabled() && admin.normalize(), "normalize runs");
          // update_config and update_all_config: the servers re-read their configuration.
          admin.updateConfiguration(admin.getRegionServers().iterator().next());
          admin.updateConfiguration();
          check(admin.getClusterMetrics().getLiveServerMetrics().size() >= 1, "getClusterMetrics");
          List<TableDescriptor> all = admin.listTableDescriptors();
          check(all.stream().anyMatch(d -> d.getTableName().equals(tn)), "listTableDescriptors");
          check(Arrays.asList(admin.listTableNames()).contains(tn), "listTableNames");
          // Flushes and compactions: of the table (through the master) and of each region (at
          // its server); the data reads the same after.
          admin.flush(tn);
          admin.compact(tn);
          admin.majorCompact(tn);
          for (org.apache.hadoop.hbase.client.RegionInfo ri : admin.getRegions(tn)) {
            admin.flushRegion(ri.getRegionName());
            admin.majorCompactRegion(ri.getRegionName());
          }
          try (Table t = conn.getTable(tn)) {
            check(Bytes.toString(t.get(new Get(b("gg"))).getValue(F, b("q"))) == null, "after the compactions");
            check(t.get(new Get(b("rm"))).size() == 2, "RowMutations after the compactions");
          }
        }
        break;
      }
      case "truncate": {
        try (Admin admin = conn.getAdmin()) {
          int regions = admin.getRegions(tn).size();
          admin.disableTable(tn);
          admin.truncateTable(tn, true);
          check(admin.isTableEnabled(tn), "enabled after truncate");
          check(admin.getRegions(tn).size() == regions, "splits kept: " + admin.getRegions(tn).size() + " regions, had " + regions);
          try (Table t = conn.getTable(tn)) {
            check(count(t, new Scan()) == 0, "empty after truncate");
            t.put(new Put(b("row-1")).addColumn(F, b("q"), b("v1")));
          }
        }
        break;
      }
      case "snapshots": {
        // Admin's snapshot calls: snapshot, listSnapshots, cloneSnapshot, restoreSnapshot (of a
        // disabled table, which stays disabled), deleteSnapshot; a second snapshot of a name is
        // refused with HBase's own exception.
        String snap = tn.getQualifierAsString() + "-snap";
        TableName clone = TableName.valueOf(tn.getNamespaceAsString(), tn.getQualifierAsString() + "_clone");
        try (Admin admin = conn.getAdmin(); Table t = conn.getTable(tn)) {
          t.put(new Put(b("snap-row")).addColumn(F, b("q"), b("before")));
          for (SnapshotDescription d : admin.listSnapshots()) {
            if (d.getName().equals(snap)) {
              admin.deleteSnapshot(snap);
            }
          }
          if (admin.tableExists(clone)) {
            if (admin.isTableEnabled(clone)) {
              admin.disableTable(clone);
            }
            admin.deleteTable(clone);
          }
          admin.snapshot(snap, tn);
          check(admin.listSnapshots().stream().anyMatch(d -> d.getName().equals(snap) && d.getTableName().equals(tn)),
              "listSnapshots names the snapshot and its table: " + admin.listSnapshots());
          boolean refused = false;
          try {
            admin.snapshot(snap, tn);
          } catch (SnapshotExistsException e) {
            refused = true;
          }
          check(refused, "a second snapshot of the same name is refused with SnapshotExistsException");
          t.put(new Put(b("snap-row")).addColumn(F, b("q"), b("after")));
          admin.cloneSnapshot(snap, clone);
          try (Table c = conn.getTable(clone)) {
            check(Bytes.toString(c.get(new Get(b("snap-row"))).getValue(F, b("q"))).equals("before"), "the clone reads the snapshot's value");
          }
          admin.disableTable(tn);
          admin.restoreSnapshot(snap);
          check(admin.isTableDisabled(tn), "the table stays disabled after restoreSnapshot");
          admin.enableTable(tn);
          check(Bytes.toString(t.get(new Get(b("snap-row"))).getValue(F, b("q"))).equals("before"), "restored: the snapshot's value again");
          admin.disableTable(clone);
          admin.deleteTable(clone);
          admin.deleteSnapshot(snap);
          check(admin.listSnapshots().stream().noneMatch(d -> d.getName().equals(snap)), "deleteSnapshot");
        }
        break;
      }
      case "split": {
        // Split the region holding the batch's rows: the same client keeps reading, finding
        // the daughters by itself.
        try (Admin admin = conn.getAdmin(); Table t = conn.getTable(tn)) {
          check(Bytes.toInt(t.get(new Get(b("b05000"))).getValue(F, b("n"))) == 5000, "a read before the split");
          int before = admin.getRegions(tn).size();
          admin.split(tn, b("b05000"));
          long deadline = System.currentTimeMillis() + 60000;
          while (admin.getRegions(tn).size() <= before) {
            check(System.currentTimeMillis() < deadline, "the split did not happen within 60 s");
            Thread.sleep(200);
          }
          for (int i = 1; i < 10000; i += 499) {
            check(Bytes.toInt(t.get(new Get(b(String.format("b%05d", i)))).getValue(F, b("n"))) == i, "get b" + i + " after the split");
          }
        }
        break;
      }
      case "merge": {
        // Merge the split's daughters back (Admin.mergeRegionsAsync with encoded names, as the
        // shell's merge_region): once their references are compacted away the merge is done and
        // the same client reads every row through the merged region.
        try (Admin admin = conn.getAdmin(); Table t = conn.getTable(tn)) {
          RegionLocator loc = conn.getRegionLocator(tn);
          org.apache.hadoop.hbase.client.RegionInfo lo = loc.getRegionLocation(b("b04999"), true).getRegion();
          org.apache.hadoop.hbase.client.RegionInfo hi = loc.getRegionLocation(b("b05000"), true).getRegion();
          check(!lo.getEncodedName().equals(hi.getEncodedName()), "the split's daughters are two regions");
          int before = admin.getRegions(tn).size();
          long rows = count(t, new Scan().withStartRow(b("b")).withStopRow(b("c")));
          admin.majorCompactRegion(lo.getRegionName());
          admin.majorCompactRegion(hi.getRegionName());
          long deadline = System.currentTimeMillis() + 60000;
          for (;;) {
            try {
              admin.mergeRegionsAsync(new byte[][] {lo.getEncodedNameAsBytes(), hi.getEncodedNameAsBytes()}, false).get(60, TimeUnit.SECONDS);
              break;
            } catch (ExecutionException | IOException e) {
              // Refused while a daughter still reads its parent's files (the compaction's news
              // reaches the master with the next heartbeat): by the submission itself or by the
              // procedure's result.
              Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
              if (cause == null || String.valueOf(cause.getMessage()).indexOf("reference files") < 0) {
                throw e;
              }
              check(System.currentTimeMillis() < deadline, "the merge was refused for 60 s: " + cause);
              Thread.sleep(500);
            }
          }
          check(admin.getRegions(tn).size() == before - 1, "one region fewer after the merge: " + admin.getRegions(tn).size() + ", had " + before);
          long after = count(t, new Scan().withStartRow(b("b")).withStopRow(b("c")));
          check(after == rows, "the batch's rows after the merge: " + after + ", had " + rows);
          for (int i = 1; i < 10000; i += 499) {
            check(Bytes.toInt(t.get(new Get(b(String.format("b%05d", i)))).getValue(F, b("n"))) == i, "get b" + i + " after the merge");
          }
        }
        break;
      }
      case "tags": {
        // Cells with tags (KeyValueCodecWithTags; the client sends tags in cell blocks, so in
        // batches, not with single puts): a TTL tag is honoured, an application's own tag type is
        // taken, a system one (ACL) is refused.
        Configuration withTags = new Configuration(conn.getConfiguration());
        withTags.set("hbase.client.rpc.codec", "org.apache.hadoop.hbase.codec.KeyValueCodecWithTags");
        try (Connection tc = ConnectionFactory.createConnection(withTags); Table t = tc.getTable(tn)) {
          long old = System.currentTimeMillis() - 3600_000L;
          t.put(Arrays.asList(new Put(b("tag-ttl")).add(new KeyValue(b("tag-ttl"), F, b("q"), old, KeyValue.Type.Put, b("v"),
              Arrays.<Tag>asList(new ArrayBackedTag((byte) 8, Bytes.toBytes(1000L)))))));
          check(t.get(new Get(b("tag-ttl"))).isEmpty(), "a cell past its TTL tag is not read");
          t.put(Arrays.asList(new Put(b("tag-app")).add(new KeyValue(b("tag-app"), F, b("q"), HConstants.LATEST_TIMESTAMP, KeyValue.Type.Put, b("v"),
              Arrays.<Tag>asList(new ArrayBackedTag((byte) 70, b("app")))))));
          check(Bytes.toString(t.get(new Get(b("tag-app"))).getValue(F, b("q"))).equals("v"), "a cell with an application's tag");
          boolean refused = false;
          try {
            t.put(Arrays.asList(new Put(b("tag-acl")).add(new KeyValue(b("tag-acl"), F, b("q"), HConstants.LATEST_TIMESTAMP, KeyValue.Type.Put, b("v"),
                Arrays.<Tag>asList(new ArrayBackedTag((byte) 1, b("x")))))));
          } catch (IOException e) {
            refused = true;
          }
          check(refused, "a cell with an ACL tag is refused");
        }
        break;
      }
      case "move": {
        // Move the region of the m rows to another server: the same client keeps writing and
        // reading through it.
        try (Admin admin = conn.getAdmin(); Table t = conn.getTable(tn)) {
          check(Bytes.toInt(t.get(new Get(b("m00001"))).getValue(F, b("n"))) == 1, "a read before the move");
          byte[] encoded = conn.getRegionLocator(tn).getRegionLocation(b("m00000"), true).getRegion().getEncodedNameAsBytes();
          admin.move(encoded);
          for (int i = 0; i < 10000; i += 499) {
            t.put(new Put(b(String.format("m%05d", i))).addColumn(F, b("n"), Bytes.toBytes(i + 1)));
            check(Bytes.toInt(t.get(new Get(b(String.format("m%05d", i)))).getValue(F, b("n"))) == i + 1, "write and read m" + i + " after the move");
          }
        }
        break;
      }
      case "readall": {
        // After the test splits and moves regions: the client finds them again by itself.
        try (Table t = conn.getTable(tn)) {
          check(count(t, new Scan().withStartRow(b("b")).withStopRow(b("c"))) == 9999, "the batch's rows after a split and a move");
          for (int i = 1; i < 10000; i += 991) {
            check(Bytes.toInt(t.get(new Get(b(String.format("b%05d", i)))).getValue(F, b("n"))) == i, "get b" + i);
          }
          t.put(new Put(b("b00000")).addColumn(F, b("n"), Bytes.toBytes(0)));
        }
        break;
      }
      case "denied": {
        // A user holding nothing: every read, write and DDL is refused as HBase refuses it.
        try (Table t = conn.getTable(tn); Admin admin = conn.getAdmin()) {
          refused("get", () -> t.get(new Get(b("row-1"))));
          refused("put", () -> t.put(new Put(b("row-1")).addColumn(F, b("q"), b("x"))));
          refused("scan", () -> count(t, new Scan()));
          refused("create", () -> admin.createTable(TableDescriptorBuilder.newBuilder(TableName.valueOf("compat_denied"))
              .setColumnFamily(ColumnFamilyDescriptorBuilder.of(F)).build()));
          refused("disable", () -> admin.disableTable(tn));
        }
        break;
      }
      case "readonly": {
        // A user granted READ on the table: reads work, writes and DDL are refused.
        try (Table t = conn.getTable(tn); Admin admin = conn.getAdmin()) {
          check(t.get(new Get(b("row-1"))).getValue(F, b("q")) != null, "a read with READ granted");
          check(count(t, new Scan()) > 0, "a scan with READ granted");
          check(admin.getDescriptor(tn).getColumnFamily(F) != null, "describe with READ granted");
          refused("put", () -> t.put(new Put(b("row-1")).addColumn(F, b("q"), b("x"))));
          refused("delete", () -> t.delete(new Delete(b("row-1"))));
          refused("disable", () -> admin.disableTable(tn));
        }
        break;
      }
      case "drop": {
        try (Admin admin = conn.getAdmin()) {
          admin.disableTable(tn);
          check(admin.isTableDisabled(tn), "disabled");
          admin.deleteTable(tn);
          check(!admin.tableExists(tn), "gone after drop");
        }
        break;
      }
      case "backpressure": {
        // HBase's client backoff (off unless hbase.client.backpressure.enabled and a backoff
        // policy are set) reads the memstore load Cellstore's multi answers carry for a region
        // past its flush size, and holds the next batch to that region back by the policy's
        // time for it.
        Configuration bc = new Configuration(conn.getConfiguration());
        bc.setBoolean("hbase.client.backpressure.enabled", true);
        bc.set("hbase.client.statistics.backoff-policy",
            "org.apache.hadoop.hbase.client.backoff.ExponentialClientBackoffPolicy");
        bc.setLong("hbase.client.exponential-backoff.max", 2000);
        TableName bt = TableName.valueOf("compat_backpressure");
        try (Admin admin = conn.getAdmin()) {
          admin.createTable(TableDescriptorBuilder.newBuilder(bt).setMemStoreFlushSize(1 << 20)
              .setColumnFamily(ColumnFamilyDescriptorBuilder.of(F)).build());
        }
        try (Connection bconn = ConnectionFactory.createConnection(bc);
            Table t = bconn.getTable(bt);
            RegionLocator rl = bconn.getRegionLocator(bt)) {
          org.apache.hadoop.hbase.HRegionLocation loc = rl.getRegionLocation(b("row"));
          org.apache.hadoop.hbase.ServerName sn = loc.getServerName();
          byte[] rn = loc.getRegion().getRegionName();
          org.apache.hadoop.hbase.client.ClusterConnection cc =
              (org.apache.hadoop.hbase.client.ClusterConnection) bconn;
          byte[] value = new byte[1024];
          int load = 0;
          long backoff = 0;
          long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
          // Batches of 2 MiB into a region that flushes at 1 MiB: an answer soon finds its
          // memstore past the flush size.
          for (int round = 0; backoff == 0; round++) {
            check(System.nanoTime() < deadline, "no memstore load reached the client in 60 s (" + round + " batches)");
            List<Put> puts = new ArrayList<>();
            for (int i = 0; i < 2048; i++) {
              puts.add(new Put(b(String.format("row-%04d-%04d", round, i))).addColumn(F, b("q"), value));
            }
            t.put(puts);
            org.apache.hadoop.hbase.client.backoff.ServerStatistics ss = cc.getStatisticsTracker().getStats(sn);
            if (ss == null || ss.getStatsForRegion(rn) == null) {
              continue;
            }
            load = ss.getStatsForRegion(rn).getMemStoreLoadPercent();
            backoff = cc.getBackoffPolicy().getBackoffTime(sn, rn, ss);
          }
          check(load > 0 && load <= 100, "memstore load " + load + " %");
          long start = System.nanoTime();
          t.put(java.util.Collections.singletonList(new Put(b("after")).addColumn(F, b("q"), value)));
          long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
          check(took >= backoff, "the batch after a " + load + " % memstore load took " + took + " ms, the client's backoff for it is " + backoff + " ms");
          check(t.exists(new Get(b("after"))), "the held-back put landed");
          System.out.println("info backpressure: memstore load " + load + " %, backoff " + backoff + " ms, next batch " + took + " ms");
        }
        try (Admin admin = conn.getAdmin()) {
          admin.disableTable(bt);
          admin.deleteTable(bt);
        }
        break;
      }
      default:
        throw new IllegalArgumentException("unknown step " + step);
    }
  }
}
