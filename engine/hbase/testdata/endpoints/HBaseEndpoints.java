// Cellstore's built-in endpoints driven by HBase's own client code: AggregationClient (from
// hbase-endpoint) and MultiRowMutationService through Table.coprocessorService, on the unshaded
// HBase client. Prints "ok <step>" after each step.
//
//   java -cp <pe jars>:<hbase-endpoint jar>:. HBaseEndpoints host:port
//
// It lives apart from testdata/*.java, which the e2e image compiles against the shaded client.
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.client.coprocessor.AggregationClient;
import org.apache.hadoop.hbase.client.coprocessor.DoubleColumnInterpreter;
import org.apache.hadoop.hbase.client.coprocessor.LongColumnInterpreter;
import org.apache.hadoop.hbase.filter.BinaryComparator;
import org.apache.hadoop.hbase.ipc.CoprocessorRpcChannel;
import org.apache.hadoop.hbase.protobuf.ProtobufUtil;
import org.apache.hadoop.hbase.protobuf.generated.ClientProtos;
import org.apache.hadoop.hbase.protobuf.generated.HBaseProtos;
import org.apache.hadoop.hbase.protobuf.generated.MultiRowMutationProtos;
import org.apache.hadoop.hbase.util.Bytes;

public class HBaseEndpoints {
  static final byte[] F = Bytes.toBytes("f");

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  static byte[] b(String s) {
    return Bytes.toBytes(s);
  }

  static ClientProtos.MutationProto put(String row, String q, String v) throws Exception {
    return ProtobufUtil.toMutation(ClientProtos.MutationProto.MutationType.PUT, new Put(b(row)).addColumn(F, b(q), b(v)));
  }

  public static void main(String[] args) throws Exception {
    Configuration conf = HBaseConfiguration.create();
    for (java.util.Map.Entry<String, String> e : HBaseTool.clientSettings(args[0]).entrySet()) {
      conf.set(e.getKey(), e.getValue());
    }
    conf.setInt("hbase.client.retries.number", 10);
    TableName tn = TableName.valueOf("endpoints");
    try (Connection conn = ConnectionFactory.createConnection(conf)) {
      try (Admin admin = conn.getAdmin()) {
        if (admin.tableExists(tn)) {
          admin.disableTable(tn);
          admin.deleteTable(tn);
        }
        // Rows "aNN" and "xNN" in two regions; the split policy keeps 3-byte prefixes together.
        admin.createTable(TableDescriptorBuilder.newBuilder(tn)
            .setColumnFamily(ColumnFamilyDescriptorBuilder.of(F))
            .setRegionSplitPolicyClassName("org.apache.hadoop.hbase.regionserver.KeyPrefixRegionSplitPolicy")
            .setValue("KeyPrefixRegionSplitPolicy.prefix_length", "3").build(), new byte[][] {b("m")});
      }
      long sum = 0, max = Long.MIN_VALUE, min = Long.MAX_VALUE;
      double dsum = 0;
      try (Table t = conn.getTable(tn)) {
        for (int i = 0; i < 100; i++) {
          String row = String.format("%s%02d", i < 50 ? "a" : "x", i % 50);
          long v = (i * 37) % 101 - 40;
          sum += v;
          max = Math.max(max, v);
          min = Math.min(min, v);
          dsum += v / 2.0;
          t.put(new Put(b(row)).addColumn(F, b("n"), Bytes.toBytes(v)).addColumn(F, b("d"), Bytes.toBytes(v / 2.0)));
        }
      }
      System.out.println("ok load");

      try (AggregationClient ac = new AggregationClient(conf)) {
        Scan scan = new Scan().addColumn(F, b("n"));
        LongColumnInterpreter li = new LongColumnInterpreter();
        check(ac.rowCount(tn, li, scan) == 100, "rowCount " + ac.rowCount(tn, li, scan));
        check(ac.sum(tn, li, scan) == sum, "sum " + ac.sum(tn, li, scan) + " want " + sum);
        check(ac.max(tn, li, scan) == max, "max " + ac.max(tn, li, scan) + " want " + max);
        check(ac.min(tn, li, scan) == min, "min " + ac.min(tn, li, scan) + " want " + min);
        check(Math.abs(ac.avg(tn, li, scan) - sum / 100.0) < 1e-9, "avg " + ac.avg(tn, li, scan));
        check(ac.std(tn, li, scan) > 0, "std " + ac.std(tn, li, scan));
        Long med = ac.median(tn, li, new Scan().addColumn(F, b("n")));
        check(med != null && med >= min && med <= max, "median " + med);
        // A range inside one region and a filter-free count of a part of the table.
        Scan part = new Scan().addColumn(F, b("n")).withStartRow(b("a10")).withStopRow(b("a20"));
        check(ac.rowCount(tn, li, part) == 10, "rowCount of a range " + ac.rowCount(tn, li, part));
        Scan ds = new Scan().addColumn(F, b("d"));
        DoubleColumnInterpreter di = new DoubleColumnInterpreter();
        check(Math.abs(ac.sum(tn, di, ds) - dsum) < 1e-9, "double sum " + ac.sum(tn, di, ds) + " want " + dsum);
        check(ac.max(tn, di, ds) == max / 2.0, "double max " + ac.max(tn, di, ds));
      } catch (Throwable e) {
        throw new AssertionError("aggregation", e);
      }
      System.out.println("ok aggregate");

      try (Table t = conn.getTable(tn)) {
        CoprocessorRpcChannel ch = t.coprocessorService(b("a05"));
        MultiRowMutationProtos.MultiRowMutationService.BlockingInterface svc =
            MultiRowMutationProtos.MultiRowMutationService.newBlockingStub(ch);
        MultiRowMutationProtos.MutateRowsResponse resp = svc.mutateRows(null, MultiRowMutationProtos.MutateRowsRequest.newBuilder()
            .addMutationRequest(put("a05", "m", "one")).addMutationRequest(put("a06", "m", "one")).build());
        check(resp.getProcessed(), "MutateRows processed");
        check(Bytes.toString(t.get(new Get(b("a06"))).getValue(F, b("m"))).equals("one"), "MutateRows applied");
        // Under a condition that does not hold: nothing changes.
        ClientProtos.Condition cond = ClientProtos.Condition.newBuilder().setRow(com.google.protobuf.ByteString.copyFrom(b("a05")))
            .setFamily(com.google.protobuf.ByteString.copyFrom(F)).setQualifier(com.google.protobuf.ByteString.copyFrom(b("m")))
            .setCompareType(HBaseProtos.CompareType.EQUAL).setComparator(ProtobufUtil.toComparator(new BinaryComparator(b("two")))).build();
        resp = svc.mutateRows(null, MultiRowMutationProtos.MutateRowsRequest.newBuilder()
            .addMutationRequest(put("a05", "m", "three")).addMutationRequest(put("a06", "m", "three")).addCondition(cond).build());
        check(!resp.getProcessed(), "MutateRows under a false condition was processed");
        check(Bytes.toString(t.get(new Get(b("a05"))).getValue(F, b("m"))).equals("one"), "MutateRows under a false condition applied");
        // Rows of two regions are refused.
        boolean refused = false;
        try {
          svc.mutateRows(null, MultiRowMutationProtos.MutateRowsRequest.newBuilder()
              .addMutationRequest(put("a07", "m", "x")).addMutationRequest(put("x07", "m", "x")).build());
        } catch (Exception e) {
          refused = true;
        }
        check(refused && t.get(new Get(b("a07"))).getValue(F, b("m")) == null, "MutateRows across regions");
      }
      System.out.println("ok multirow");
    }
  }
}
