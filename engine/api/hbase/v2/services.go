// Package hbasev2 holds Cellstore's own protobuf definitions of the HBase 2.6 RPC messages that
// its HBase-compatible endpoints decode and encode, so that the stock HBase Java client works
// against Cellstore unmodified. Only message bytes, method names and Java class names travel on
// HBase's wire, so the proto package names here are Cellstore's.
package hbasev2

import "google.golang.org/protobuf/proto"

// NewCall returns fresh, empty request and response messages of one RPC method.
type NewCall func() (request, response proto.Message)

// Services maps an HBase service name, as sent in ConnectionHeader.service_name, to its methods,
// keyed by RequestHeader.method_name exactly as HBase spells them (case matters: MasterService
// has "truncateTable" and "getProcedureResult"). Methods not listed are not modelled; the server
// answers them with an exception.
var Services = map[string]map[string]NewCall{
	"ClientService": {
		"Get": func() (proto.Message, proto.Message) {
			return &GetRequest{}, &GetResponse{}
		},
		"Mutate": func() (proto.Message, proto.Message) {
			return &MutateRequest{}, &MutateResponse{}
		},
		"Scan": func() (proto.Message, proto.Message) {
			return &ScanRequest{}, &ScanResponse{}
		},
		"Multi": func() (proto.Message, proto.Message) {
			return &MultiRequest{}, &MultiResponse{}
		},
		"ExecService": func() (proto.Message, proto.Message) {
			return &CoprocessorServiceRequest{}, &CoprocessorServiceResponse{}
		},
		"ExecRegionServerService": func() (proto.Message, proto.Message) {
			return &CoprocessorServiceRequest{}, &CoprocessorServiceResponse{}
		},
	},
	"AdminService": {
		"FlushRegion": func() (proto.Message, proto.Message) {
			return &FlushRegionRequest{}, &FlushRegionResponse{}
		},
		"CompactRegion": func() (proto.Message, proto.Message) {
			return &CompactRegionRequest{}, &CompactRegionResponse{}
		},
		"UpdateConfiguration": func() (proto.Message, proto.Message) {
			return &UpdateConfigurationRequest{}, &UpdateConfigurationResponse{}
		},
	},
	"MasterService": {
		"IsMasterRunning": func() (proto.Message, proto.Message) {
			return &IsMasterRunningRequest{}, &IsMasterRunningResponse{}
		},
		"IsMasterInMaintenanceMode": func() (proto.Message, proto.Message) {
			return &IsInMaintenanceModeRequest{}, &IsInMaintenanceModeResponse{}
		},
		"CreateTable": func() (proto.Message, proto.Message) {
			return &CreateTableRequest{}, &CreateTableResponse{}
		},
		"DeleteTable": func() (proto.Message, proto.Message) {
			return &DeleteTableRequest{}, &DeleteTableResponse{}
		},
		"FlushTable": func() (proto.Message, proto.Message) {
			return &FlushTableRequest{}, &FlushTableResponse{}
		},
		"truncateTable": func() (proto.Message, proto.Message) {
			return &TruncateTableRequest{}, &TruncateTableResponse{}
		},
		"EnableTable": func() (proto.Message, proto.Message) {
			return &EnableTableRequest{}, &EnableTableResponse{}
		},
		"DisableTable": func() (proto.Message, proto.Message) {
			return &DisableTableRequest{}, &DisableTableResponse{}
		},
		"ModifyTable": func() (proto.Message, proto.Message) {
			return &ModifyTableRequest{}, &ModifyTableResponse{}
		},
		"AddColumn": func() (proto.Message, proto.Message) {
			return &AddColumnRequest{}, &AddColumnResponse{}
		},
		"DeleteColumn": func() (proto.Message, proto.Message) {
			return &DeleteColumnRequest{}, &DeleteColumnResponse{}
		},
		"ModifyColumn": func() (proto.Message, proto.Message) {
			return &ModifyColumnRequest{}, &ModifyColumnResponse{}
		},
		"Snapshot": func() (proto.Message, proto.Message) {
			return &SnapshotRequest{}, &SnapshotResponse{}
		},
		"IsSnapshotDone": func() (proto.Message, proto.Message) {
			return &IsSnapshotDoneRequest{}, &IsSnapshotDoneResponse{}
		},
		"GetCompletedSnapshots": func() (proto.Message, proto.Message) {
			return &GetCompletedSnapshotsRequest{}, &GetCompletedSnapshotsResponse{}
		},
		"DeleteSnapshot": func() (proto.Message, proto.Message) {
			return &DeleteSnapshotRequest{}, &DeleteSnapshotResponse{}
		},
		"RestoreSnapshot": func() (proto.Message, proto.Message) {
			return &RestoreSnapshotRequest{}, &RestoreSnapshotResponse{}
		},
		"getProcedureResult": func() (proto.Message, proto.Message) {
			return &GetProcedureResultRequest{}, &GetProcedureResultResponse{}
		},
		"IsProcedureDone": func() (proto.Message, proto.Message) {
			return &IsProcedureDoneRequest{}, &IsProcedureDoneResponse{}
		},
		"GetTableDescriptors": func() (proto.Message, proto.Message) {
			return &GetTableDescriptorsRequest{}, &GetTableDescriptorsResponse{}
		},
		"GetTableNames": func() (proto.Message, proto.Message) {
			return &GetTableNamesRequest{}, &GetTableNamesResponse{}
		},
		"GetTableState": func() (proto.Message, proto.Message) {
			return &GetTableStateRequest{}, &GetTableStateResponse{}
		},
		"CreateNamespace": func() (proto.Message, proto.Message) {
			return &CreateNamespaceRequest{}, &CreateNamespaceResponse{}
		},
		"DeleteNamespace": func() (proto.Message, proto.Message) {
			return &DeleteNamespaceRequest{}, &DeleteNamespaceResponse{}
		},
		"ModifyNamespace": func() (proto.Message, proto.Message) {
			return &ModifyNamespaceRequest{}, &ModifyNamespaceResponse{}
		},
		"GetNamespaceDescriptor": func() (proto.Message, proto.Message) {
			return &GetNamespaceDescriptorRequest{}, &GetNamespaceDescriptorResponse{}
		},
		"ListNamespaces": func() (proto.Message, proto.Message) {
			return &ListNamespacesRequest{}, &ListNamespacesResponse{}
		},
		"ListNamespaceDescriptors": func() (proto.Message, proto.Message) {
			return &ListNamespaceDescriptorsRequest{}, &ListNamespaceDescriptorsResponse{}
		},
		"ListTableDescriptorsByNamespace": func() (proto.Message, proto.Message) {
			return &ListTableDescriptorsByNamespaceRequest{}, &ListTableDescriptorsByNamespaceResponse{}
		},
		"ListTableNamesByNamespace": func() (proto.Message, proto.Message) {
			return &ListTableNamesByNamespaceRequest{}, &ListTableNamesByNamespaceResponse{}
		},
		"GetSchemaAlterStatus": func() (proto.Message, proto.Message) {
			return &GetSchemaAlterStatusRequest{}, &GetSchemaAlterStatusResponse{}
		},
		"GetClusterStatus": func() (proto.Message, proto.Message) {
			return &GetClusterStatusRequest{}, &GetClusterStatusResponse{}
		},
		"Balance": func() (proto.Message, proto.Message) {
			return &BalanceRequest{}, &BalanceResponse{}
		},
		"SetBalancerRunning": func() (proto.Message, proto.Message) {
			return &SetBalancerRunningRequest{}, &SetBalancerRunningResponse{}
		},
		"IsBalancerEnabled": func() (proto.Message, proto.Message) {
			return &IsBalancerEnabledRequest{}, &IsBalancerEnabledResponse{}
		},
		"MoveRegion": func() (proto.Message, proto.Message) {
			return &MoveRegionRequest{}, &MoveRegionResponse{}
		},
		"SplitRegion": func() (proto.Message, proto.Message) {
			return &SplitTableRegionRequest{}, &SplitTableRegionResponse{}
		},
		"Normalize": func() (proto.Message, proto.Message) {
			return &NormalizeRequest{}, &NormalizeResponse{}
		},
		"SetNormalizerRunning": func() (proto.Message, proto.Message) {
			return &SetNormalizerRunningRequest{}, &SetNormalizerRunningResponse{}
		},
		"IsNormalizerEnabled": func() (proto.Message, proto.Message) {
			return &IsNormalizerEnabledRequest{}, &IsNormalizerEnabledResponse{}
		},
		"MergeTableRegions": func() (proto.Message, proto.Message) {
			return &MergeTableRegionsRequest{}, &MergeTableRegionsResponse{}
		},
	},
	"ClientMetaService": {
		"GetClusterId": func() (proto.Message, proto.Message) {
			return &GetClusterIdRequest{}, &GetClusterIdResponse{}
		},
		"GetActiveMaster": func() (proto.Message, proto.Message) {
			return &GetActiveMasterRequest{}, &GetActiveMasterResponse{}
		},
		"GetMasters": func() (proto.Message, proto.Message) {
			return &GetMastersRequest{}, &GetMastersResponse{}
		},
		"GetMetaRegionLocations": func() (proto.Message, proto.Message) {
			return &GetMetaRegionLocationsRequest{}, &GetMetaRegionLocationsResponse{}
		},
		"GetBootstrapNodes": func() (proto.Message, proto.Message) {
			return &GetBootstrapNodesRequest{}, &GetBootstrapNodesResponse{}
		},
	},
}

// Lookup returns the constructor of service's method, or false when it is not modelled.
func Lookup(service, method string) (NewCall, bool) {
	m, ok := Services[service]
	if !ok {
		return nil, false
	}
	c, ok := m[method]
	return c, ok
}
