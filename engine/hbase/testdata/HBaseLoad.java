// Cellstore's load of the stock HBase Java client, for the e2e suite: writers put rows and readers
// get rows already acknowledged, through HBase's own client (the RPC connection registry and
// bootstrap servers only; TLS from the environment as HBaseCompat reads it), until told to stop.
// An HTTP API on :8080 answers in loadcheck's JSON shape, so the suite drives both the same way:
//
//   GET /healthz   200 once the table exists and the load runs
//   GET /stats     counters so far
//   POST /reset    zero the counters (not the acknowledged rows)
//   POST /stop     stop the load, read back every acknowledged row, answer the final counters
//
// The counters name the slowest requests with their thread, and the process's longest stalls; the client logs every retry (with
// the thread's name) when a logging backend is on the class path, as in the hbaseload image.
//
//   java -cp <hbase client jars>:<classes> HBaseLoad host:port,... table writers readers [reads-per-second]
//
// reads-per-second paces the readers together (each at its share); 0 or none: as fast as answered.
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.NotServingRegionException;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.ipc.RemoteWithExtrasException;
import org.apache.hadoop.hbase.util.Bytes;

public class HBaseLoad {
  static final byte[] F = Bytes.toBytes("f");
  static final byte[] Q = Bytes.toBytes("q");
  static final int MAX_ERRORS = 20;
  static final int MAX_SLOWEST = 5;

  // Slow is one of the slowest requests: when it started, what it was (with its thread), how long.
  static final class Slow {
    final Instant start;
    final String op, row;
    final double ms;

    Slow(Instant start, String op, String row, double ms) {
      this.start = start;
      this.op = op;
      this.row = row;
      this.ms = ms;
    }
  }

  final Connection conn;
  final TableName tn;
  final AtomicBoolean stopped = new AtomicBoolean();
  final AtomicBoolean running = new AtomicBoolean();
  // acked[w]: writer w's rows 0..acked[w]-1 are acknowledged (a writer retries a failed row
  // until it is acknowledged, so they are contiguous).
  final AtomicLongArray acked;
  final AtomicLong writes = new AtomicLong(), reads = new AtomicLong(), failedWrites = new AtomicLong(),
      failedReads = new AtomicLong(), mismatches = new AtomicLong(), maxLatencyMicros = new AtomicLong();
  final List<String> errors = new ArrayList<>();
  final List<Slow> slowest = new ArrayList<>(); // slowest first
  final List<Slow> stalls = new ArrayList<>(); // the process's longest stalls, longest first
  final List<Thread> threads = new ArrayList<>();
  volatile String verified = null; // the final answer, once stopped

  long readIntervalNanos; // per reader; 0: unpaced

  HBaseLoad(Connection conn, TableName tn, int writers) {
    this.conn = conn;
    this.tn = tn;
    this.acked = new AtomicLongArray(writers);
  }

  static byte[] key(int writer, long seq) {
    return Bytes.toBytes(String.format("w%d-%010d", writer, seq));
  }

  void error(String what, Exception e) {
    synchronized (errors) {
      if (errors.size() < MAX_ERRORS) {
        errors.add(what + ": " + e);
      }
    }
  }

  void latency(Instant started, long startNanos, String op, byte[] row) {
    long us = (System.nanoTime() - startNanos) / 1000;
    maxLatencyMicros.accumulateAndGet(us, Math::max);
    keep(slowest, new Slow(started, op + " (" + Thread.currentThread().getName() + ")", Bytes.toString(row), us / 1000.0));
  }

  // keep puts s into list (longest first) if it is among the MAX_SLOWEST longest.
  static void keep(List<Slow> list, Slow s) {
    synchronized (list) {
      if (list.size() == MAX_SLOWEST && s.ms <= list.get(MAX_SLOWEST - 1).ms) {
        return;
      }
      int i = 0;
      while (i < list.size() && list.get(i).ms >= s.ms) {
        i++;
      }
      list.add(i, s);
      if (list.size() > MAX_SLOWEST) {
        list.remove(MAX_SLOWEST);
      }
    }
  }

  // watchStalls finds the times the whole process stood still (a garbage collection's pause, or
  // its pod waiting for a CPU): a thread that sleeps 10 ms at a time and wakes up 50 ms or more
  // late. A request slow during a stall was slow in the client, not in the store.
  void watchStalls() {
    long last = System.nanoTime();
    while (!stopped.get()) {
      try {
        Thread.sleep(10);
      } catch (InterruptedException e) {
        return;
      }
      long now = System.nanoTime(), late = now - last - 10_000_000L;
      last = now;
      if (late >= 50_000_000L) {
        keep(stalls, new Slow(Instant.now().minusNanos(late), "stall", "", late / 1e6));
      }
    }
  }

  void writer(int w) {
    try (Table t = conn.getTable(tn)) {
      while (!stopped.get()) {
        long seq = acked.get(w);
        byte[] k = key(w, seq);
        Instant started = Instant.now();
        long start = System.nanoTime();
        try {
          t.put(new Put(k).addColumn(F, Q, k));
          acked.set(w, seq + 1);
          writes.incrementAndGet();
        } catch (Exception e) {
          failedWrites.incrementAndGet();
          error("put " + Bytes.toString(k), e);
        }
        latency(started, start, "put", k);
      }
    } catch (IOException e) {
      error("writer " + w, e);
    }
  }

  void reader() {
    ThreadLocalRandom rnd = ThreadLocalRandom.current();
    long next = System.nanoTime();
    try (Table t = conn.getTable(tn)) {
      while (!stopped.get()) {
        if (readIntervalNanos > 0) {
          // Paced: the next read is due one interval after the last was due (a slow read is not
          // made up for by a burst later than one interval).
          next = Math.max(next + readIntervalNanos, System.nanoTime() - readIntervalNanos);
          long wait = next - System.nanoTime();
          if (wait > 0) {
            java.util.concurrent.locks.LockSupport.parkNanos(wait);
          }
        }
        int w = rnd.nextInt(acked.length());
        long n = acked.get(w);
        if (n == 0) {
          try {
            Thread.sleep(10);
          } catch (InterruptedException e) {
            return;
          }
          continue;
        }
        byte[] k = key(w, rnd.nextLong(n));
        Instant started = Instant.now();
        long start = System.nanoTime();
        try {
          Result r = t.get(new Get(k));
          reads.incrementAndGet();
          if (!Bytes.equals(r.getValue(F, Q), k)) {
            mismatches.incrementAndGet();
            error("get " + Bytes.toString(k), new IllegalStateException("read " + r));
          }
        } catch (Exception e) {
          failedReads.incrementAndGet();
          error("get " + Bytes.toString(k), e);
        }
        latency(started, start, "get", k);
      }
    } catch (IOException e) {
      error("reader", e);
    }
  }

  // verify reads back every acknowledged row, in batches: lost = not there, failed = unreadable.
  String stopAndVerify() throws InterruptedException {
    synchronized (this) {
      if (verified != null) {
        return verified;
      }
      stopped.set(true);
      for (Thread th : threads) {
        th.join();
      }
      long total = 0, lost = 0, failed = 0;
      try (Table t = conn.getTable(tn)) {
        for (int w = 0; w < acked.length(); w++) {
          long n = acked.get(w);
          total += n;
          for (long from = 0; from < n; from += 1000) {
            List<Get> gets = new ArrayList<>();
            for (long s = from; s < Math.min(n, from + 1000); s++) {
              gets.add(new Get(key(w, s)));
            }
            try {
              Result[] rs = t.get(gets);
              for (int i = 0; i < rs.length; i++) {
                if (!Bytes.equals(rs[i].getValue(F, Q), gets.get(i).getRow())) {
                  lost++;
                }
              }
            } catch (Exception e) {
              failed += gets.size();
              error("verify", e);
            }
          }
        }
      } catch (IOException e) {
        error("verify", e);
      }
      verified = stats(total, lost, failed);
      return verified;
    }
  }

  static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }

  String stats(long acknowledged, long lost, long verifyFailed) {
    StringBuilder errs = new StringBuilder("[");
    synchronized (errors) {
      for (int i = 0; i < errors.size(); i++) {
        errs.append(i > 0 ? "," : "").append(quote(errors.get(i)));
      }
    }
    errs.append("]");
    StringBuilder slow = new StringBuilder("[");
    synchronized (slowest) {
      for (int i = 0; i < slowest.size(); i++) {
        Slow r = slowest.get(i);
        slow.append(i > 0 ? "," : "").append(String.format("{\"Start\":%s,\"Op\":%s,\"Row\":%s,\"Ms\":%.1f}",
            quote(r.start.toString()), quote(r.op), quote(r.row), r.ms));
      }
    }
    slow.append("]");
    StringBuilder stall = new StringBuilder("[");
    synchronized (stalls) {
      for (int i = 0; i < stalls.size(); i++) {
        Slow r = stalls.get(i);
        stall.append(i > 0 ? "," : "").append(String.format("{\"Start\":%s,\"Ms\":%.1f}", quote(r.start.toString()), r.ms));
      }
    }
    stall.append("]");
    return String.format("{\"Writes\":%d,\"Reads\":%d,\"FailedWrites\":%d,\"FailedReads\":%d,\"Mismatches\":%d,"
        + "\"MaxLatencyMs\":%.1f,\"Slowest\":%s,\"Stalls\":%s,\"Errors\":%s,\"Acknowledged\":%d,\"Lost\":%d,\"VerifyFailed\":%d}",
        writes.get(), reads.get(), failedWrites.get(), failedReads.get(), mismatches.get(),
        maxLatencyMicros.get() / 1000.0, slow, stall, errs, acknowledged, lost, verifyFailed);
  }

  void reset() {
    writes.set(0);
    reads.set(0);
    failedWrites.set(0);
    failedReads.set(0);
    mismatches.set(0);
    maxLatencyMicros.set(0);
    synchronized (slowest) {
      slowest.clear();
    }
    synchronized (stalls) {
      stalls.clear();
    }
    synchronized (errors) {
      errors.clear();
    }
  }

  static void answer(HttpExchange ex, int code, String body) throws IOException {
    byte[] b = body.getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("Content-Type", "application/json");
    ex.sendResponseHeaders(code, b.length);
    try (OutputStream o = ex.getResponseBody()) {
      o.write(b);
    }
  }

  // warmExceptionPath unwraps one server exception before the load starts. The first remote
  // exception a JVM's HBase client unwraps sets up the class loader it loads exception classes
  // with (it parses the configuration again and starts Hadoop's FileSystem for
  // hbase.dynamic.jars.dir): 0.15-0.7 s on an idle machine, up to a second on a busy node, during
  // which every thread that meets a server exception waits. A long-running client pays it once;
  // without this the load would pay it at the first region move of the measured restart.
  static void warmExceptionPath() {
    try {
      new RemoteWithExtrasException(NotServingRegionException.class.getName(), "warm-up", false).unwrapRemoteException();
    } catch (Throwable t) { // only a head start: the load runs without it
      System.err.println("warming the client's exception path failed: " + t);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 4 && args.length != 5) {
      System.err.println("usage: HBaseLoad bootstrap-servers table writers readers [reads-per-second]");
      System.exit(2);
    }
    Configuration conf = HBaseConfiguration.create();
    HBaseCompat.configure(conf, args[0]);
    // A region moving or a server restarting is waited out by the client's own retries.
    conf.setInt("hbase.client.retries.number", 30);
    conf.setInt("hbase.client.operation.timeout", 120000);
    // Every retry is logged (at INFO, from the first), so a slow request's retries can be read.
    conf.setInt("hbase.client.start.log.errors.counter", -1);
    TableName tn = TableName.valueOf(args[1]);
    int writers = Integer.parseInt(args[2]), readers = Integer.parseInt(args[3]);

    HttpServer http = HttpServer.create(new InetSocketAddress(8080), 16);
    Connection conn = ConnectionFactory.createConnection(conf);
    HBaseLoad load = new HBaseLoad(conn, tn, writers);
    double readRate = args.length == 5 ? Double.parseDouble(args[4]) : 0;
    if (readRate > 0 && readers > 0) {
      load.readIntervalNanos = (long) (readers * 1e9 / readRate);
    }
    http.createContext("/healthz", ex -> answer(ex, load.running.get() ? 200 : 503, load.running.get() ? "\"ok\"" : "\"starting\""));
    http.createContext("/stats", ex -> answer(ex, 200, load.stats(0, 0, 0)));
    http.createContext("/reset", ex -> {
      load.reset();
      answer(ex, 200, load.stats(0, 0, 0));
    });
    http.createContext("/stop", ex -> {
      try {
        answer(ex, 200, load.stopAndVerify());
      } catch (InterruptedException e) {
        answer(ex, 500, quote(e.toString()));
      }
    });
    http.start();

    try (Admin admin = conn.getAdmin()) {
      if (!admin.tableExists(tn)) {
        // One region per writer.
        byte[][] splits = new byte[writers - 1][];
        for (int w = 1; w < writers; w++) {
          splits[w - 1] = Bytes.toBytes("w" + w);
        }
        TableDescriptorBuilder td = TableDescriptorBuilder.newBuilder(tn).setColumnFamily(ColumnFamilyDescriptorBuilder.of(F));
        if (splits.length == 0) {
          admin.createTable(td.build());
        } else {
          admin.createTable(td.build(), splits);
        }
      }
    }
    warmExceptionPath();
    for (int w = 0; w < writers; w++) {
      final int id = w;
      load.threads.add(new Thread(() -> load.writer(id), "writer-" + w));
    }
    for (int r = 0; r < readers; r++) {
      load.threads.add(new Thread(load::reader, "reader-" + r));
    }
    for (Thread th : load.threads) {
      th.start();
    }
    Thread watch = new Thread(load::watchStalls, "stall-watch");
    watch.setDaemon(true);
    watch.start();
    load.running.set(true);
    System.out.println("HBaseLoad: " + writers + " writers and " + readers + " readers" + (readRate > 0 ? " (" + readRate + " reads/s)" : "") +
        " on " + tn + " through " + args[0]);
  }
}
