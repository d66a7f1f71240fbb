// Package hbase lets the stock HBase 2.x clients (Java applications, PerformanceEvaluation, the
// shell) use Cellstore unmodified: region servers speak HBase's RPC protocol on their data port
// beside Cellstore's own (a connection is told apart by its first bytes), with the client's
// connection registry (hbase.client.registry.impl = RpcConnectionRegistry,
// hbase.client.bootstrap.servers = any region server). Each region server is all an HBase client
// needs: it answers ClientMetaService (the cluster id, and itself as the active master and as the
// server of hbase:meta), serves ClientService calls of its regions through the same handlers as
// Cellstore's protocol (quotas, access control and metrics apply alike), forwards MasterService
// calls to the active master, and synthesizes hbase:meta's rows from the master's region
// locations. docs/hbase-clients.md says what works and what does not.
package hbase
