// Runs HBase's own tools — PerformanceEvaluation and the shell — against a Cellstore cluster with
// only the RPC connection registry, its bootstrap servers and (from the environment, as
// HBaseCompat reads it) TLS with a client certificate: the e2e suite runs them from a pod, where
// there is no shell to prepare their settings.
//
//   java -cp <pe jars, shell jars, these classes> HBaseTool host:port,... pe [PE options] COMMAND THREADS
//   java -cp <...> HBaseTool host:port,... shell 'create ...' 'put ...' ...   (one shell line per argument)
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public class HBaseTool {
  // clientSettings are what an HBase client needs to reach Cellstore: the RPC connection registry,
  // the bootstrap servers, and TLS from HBASE_COMPAT_TLS_CA (the cluster's CA, PEM),
  // HBASE_COMPAT_TLS_CERT and HBASE_COMPAT_TLS_KEY (the user's certificate and key, PEM; HBase's
  // PEM key store wants both in one file, written to a temporary file) — no TLS without a CA.
  static Map<String, String> clientSettings(String bootstrapServers) throws Exception {
    Map<String, String> s = new LinkedHashMap<>();
    s.put("hbase.client.registry.impl", "org.apache.hadoop.hbase.client.RpcConnectionRegistry");
    s.put("hbase.client.bootstrap.servers", bootstrapServers);
    String ca = System.getenv("HBASE_COMPAT_TLS_CA");
    if (ca == null || ca.isEmpty()) {
      return s;
    }
    Path ks = Files.createTempFile("hbase-client-", ".pem");
    ks.toFile().deleteOnExit();
    Files.write(ks, Files.readAllBytes(Paths.get(System.getenv("HBASE_COMPAT_TLS_KEY"))));
    Files.write(ks, Files.readAllBytes(Paths.get(System.getenv("HBASE_COMPAT_TLS_CERT"))), StandardOpenOption.APPEND);
    s.put("hbase.client.netty.tls.enabled", "true");
    s.put("hbase.rpc.tls.protocol", "TLSv1.3"); // Cellstore serves TLS 1.3 only; HBase asks 1.2 by default
    s.put("hbase.rpc.tls.truststore.location", ca);
    s.put("hbase.rpc.tls.truststore.type", "PEM");
    s.put("hbase.rpc.tls.keystore.location", ks.toString());
    s.put("hbase.rpc.tls.keystore.type", "PEM");
    return s;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 2 || !(args[1].equals("pe") || args[1].equals("shell"))) {
      System.err.println("usage: HBaseTool bootstrap-servers pe|shell ...");
      System.exit(2);
    }
    List<String> defs = new ArrayList<>();
    for (Map.Entry<String, String> e : clientSettings(args[0]).entrySet()) {
      defs.add("-D" + e.getKey() + "=" + e.getValue());
    }
    List<String> rest = Arrays.asList(args).subList(2, args.length);
    List<String> argv = new ArrayList<>();
    String main;
    if (args[1].equals("pe")) {
      main = "org.apache.hadoop.hbase.PerformanceEvaluation";
      // PE reports through its logger: warnings, and its own information (the timings).
      Path log = Files.createTempFile("log4j2-", ".properties");
      Files.write(log, String.join("\n", "status = warn", "appender.console.type = Console", "appender.console.name = OUT",
          "appender.console.layout.type = PatternLayout", "appender.console.layout.pattern = %p %c{1}: %m%n",
          "rootLogger.level = warn", "rootLogger.appenderRef.out.ref = OUT",
          "logger.pe.name = org.apache.hadoop.hbase.PerformanceEvaluation", "logger.pe.level = info", "").getBytes());
      System.setProperty("log4j2.configurationFile", log.toString());
      argv.addAll(defs);
      argv.addAll(rest);
    } else {
      main = "org.jruby.JarBootstrapMain";
      Path script = Files.createTempFile("hbase-shell-", ".rb");
      Files.write(script, (String.join("\n", rest) + "\nexit\n").getBytes());
      argv.add("-n");
      argv.addAll(defs);
      argv.add("-Dhbase.client.retries.number=10");
      argv.add(script.toString());
    }
    Class.forName(main).getMethod("main", String[].class).invoke(null, (Object) argv.toArray(new String[0]));
  }
}
