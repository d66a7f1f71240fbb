// Cellstore's HBase wire-compatibility program: the stock HBase Java client, configured only with
// the RPC connection registry and bootstrap servers, runs the steps named on the command line
// against a Cellstore server and prints "ok <step>" after each (anything else fails the run).
//
//   java -cp <hbase client jars>:. HBaseCompat host:port step...
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Delete;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
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

  public static void main(String[] args) throws Exception {
    Configuration conf = HBaseConfiguration.create();
    conf.set("hbase.client.registry.impl", "org.apache.hadoop.hbase.client.RpcConnectionRegistry");
    conf.set("hbase.client.bootstrap.servers", args[0]);
    conf.setInt("hbase.client.retries.number", 10);
    conf.setInt("hbase.client.operation.timeout", 60000);
    TableName tn = TableName.valueOf("compat");
    try (Connection conn = ConnectionFactory.createConnection(conf)) {
      for (String step : Arrays.copyOfRange(args, 1, args.length)) {
        run(conn, tn, step);
        System.out.println("ok " + step);
      }
    }
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
      case "drop": {
        try (Admin admin = conn.getAdmin()) {
          admin.disableTable(tn);
          check(admin.isTableDisabled(tn), "disabled");
          admin.deleteTable(tn);
          check(!admin.tableExists(tn), "gone after drop");
        }
        break;
      }
      default:
        throw new IllegalArgumentException("unknown step " + step);
    }
  }
}
