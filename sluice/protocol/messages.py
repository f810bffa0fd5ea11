"""Declarations of every Kafka API Sluice implements -- the single source of the wire format.

Transcribed from Apache Kafka's ``clients/src/main/resources/common/message/*Request.json`` and
``*Response.json`` (field names in snake_case, same order, versions, nullable versions, defaults,
tags). Only fields that exist in the implemented version range are listed; the ``versions=`` of
each API is exactly what the codec implements (``framing.SUPPORTED_VERSIONS`` is built from it).
Kafka 4 dropped some old versions from its JSON (CreateTopics v0-1, DeleteTopics v0, JoinGroup
v0-1, OffsetCommit v0-1, OffsetFetch v0); their fields are the ``0+`` fields declared here, as in
Kafka 3.x.

To add a version: widen ``versions=`` and add the fields that version introduces (one line each).
The encoders and decoders are derived by :mod:`sluice.protocol.schema`.

Every message class is exported by name (``ProduceRequest``, ``FetchResponse``...); nested
structs are attributes of it (``ProduceResponse.TopicProduceResponse``,
``ProduceResponse.PartitionProduceResponse``). The type checker reads them from
``messages.pyi``, generated from these declarations by :mod:`sluice.protocol.codegen`.
"""

from __future__ import annotations

from .schema import Api, F, StructSchema, api

# Request header v1 (classic) / v2 (flexible API versions: adds tagged fields). The client_id
# keeps the classic int16-length encoding even in v2 (``"flexibleVersions": "none"`` in Kafka).
REQUEST_HEADER = StructSchema(
    "RequestHeader",
    [
        F("api_key", "int16"),
        F("api_version", "int16"),
        F("correlation_id", "int32"),
        F("client_id", "string", "1+", nullable="1+", default=None, flexible=False),
    ],
)
# Response header v0 / v1 (flexible: adds tagged fields). ApiVersions responses always use v0.
RESPONSE_HEADER = StructSchema("ResponseHeader", [F("correlation_id", "int32")])

# fmt: off
# (one line per field, nested like the JSON; the formatter would explode every field)

Produce = api(
    0, "Produce", versions="3-8", flexible="9+",
    request=[
        F("transactional_id", "string", "3+", nullable="3+", default=None),
        F("acks", "int16"),
        F("timeout_ms", "int32"),
        F("topic_data", "[]TopicProduceData", fields=[
            F("name", "string", "0-12"),
            F("partition_data", "[]PartitionProduceData", fields=[
                F("index", "int32"),
                F("records", "records", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        F("responses", "[]TopicProduceResponse", fields=[
            F("name", "string", "0-12"),
            F("partition_responses", "[]PartitionProduceResponse", fields=[
                F("index", "int32"),
                F("error_code", "int16"),
                F("base_offset", "int64"),
                F("log_append_time_ms", "int64", "2+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("record_errors", "[]BatchIndexAndErrorMessage", "8+", fields=[
                    F("batch_index", "int32", "8+"),
                    F("batch_index_error_message", "string", "8+", nullable="8+", default=None),
                ]),
                F("error_message", "string", "8+", nullable="8+", default=None),
            ]),
        ]),
        F("throttle_time_ms", "int32", "1+"),
    ],
)

Fetch = api(
    1, "Fetch", versions="4-13", flexible="12+",
    request=[
        F("cluster_id", "string", "12+", nullable="12+", default=None, tag=0),
        F("replica_id", "int32", "0-14", default=-1),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=0x7fffffff),
        F("isolation_level", "int8", "4+"),
        F("session_id", "int32", "7+"),
        F("session_epoch", "int32", "7+", default=-1),
        F("topics", "[]FetchTopic", fields=[
            F("topic", "string", "0-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", "[]FetchPartition", fields=[
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "9+", default=-1),
                F("fetch_offset", "int64"),
                F("last_fetched_epoch", "int32", "12+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("partition_max_bytes", "int32"),
            ]),
        ]),
        F("forgotten_topics_data", "[]ForgottenTopic", "7+", fields=[
            F("topic", "string", "7-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", "[]int32", "7+"),
        ]),
        F("rack_id", "string", "11+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "7+"),
        F("session_id", "int32", "7+"),
        F("responses", "[]FetchableTopicResponse", fields=[
            F("topic", "string", "0-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("high_watermark", "int64"),
                F("last_stable_offset", "int64", "4+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("diverging_epoch", "EpochEndOffset", "12+", tag=0, fields=[
                    F("epoch", "int32", "12+", default=-1),
                    F("end_offset", "int64", "12+", default=-1),
                ]),
                F("current_leader", "LeaderIdAndEpoch", "12+", tag=1, fields=[
                    F("leader_id", "int32", "12+", default=-1),
                    F("leader_epoch", "int32", "12+", default=-1),
                ]),
                F("snapshot_id", "SnapshotId", "12+", tag=2, fields=[
                    F("end_offset", "int64", default=-1),
                    F("epoch", "int32", default=-1),
                ]),
                F("aborted_transactions", "[]AbortedTransaction", "4+", nullable="4+", fields=[
                    F("producer_id", "int64", "4+"),
                    F("first_offset", "int64", "4+"),
                ]),
                F("preferred_read_replica", "int32", "11+", default=-1),
                # Kafka never sends null records and librdkafka rejects them ("invalid
                # MessageSetSize -1"): default to empty, unlike the JSON (null).
                F("records", "records", nullable="0+", default=b""),
            ]),
        ]),
    ],
)

ListOffsets = api(
    2, "ListOffsets", versions="1-9", flexible="6+",
    request=[
        F("replica_id", "int32"),
        F("isolation_level", "int8", "2+"),
        F("topics", "[]ListOffsetsTopic", fields=[
            F("name", "string"),
            F("partitions", "[]ListOffsetsPartition", fields=[
                F("partition_index", "int32"),
                F("current_leader_epoch", "int32", "4+", default=-1),
                F("timestamp", "int64"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", "[]ListOffsetsTopicResponse", fields=[
            F("name", "string"),
            F("partitions", "[]ListOffsetsPartitionResponse", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("timestamp", "int64", "1+", default=-1),
                F("offset", "int64", "1+", default=-1),
                F("leader_epoch", "int32", "4+", default=-1),
            ]),
        ]),
    ],
)

Metadata = api(
    3, "Metadata", versions="1-12", flexible="9+",
    request=[
        F("topics", "[]MetadataRequestTopic", nullable="1+", fields=[
            F("topic_id", "uuid", "10+"),
            F("name", "string", nullable="10+"),
        ]),
        F("allow_auto_topic_creation", "bool", "4+", default=True),
        F("include_cluster_authorized_operations", "bool", "8-10"),
        F("include_topic_authorized_operations", "bool", "8+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F("brokers", "[]MetadataResponseBroker", fields=[
            F("node_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", "1+", nullable="1+", default=None),
        ]),
        F("cluster_id", "string", "2+", nullable="2+", default=None),
        F("controller_id", "int32", "1+", default=-1),
        F("topics", "[]MetadataResponseTopic", fields=[
            F("error_code", "int16"),
            F("name", "string", nullable="12+"),
            F("topic_id", "uuid", "10+"),
            F("is_internal", "bool", "1+"),
            F("partitions", "[]MetadataResponsePartition", fields=[
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", "7+", default=-1),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("offline_replicas", "[]int32", "5+"),
            ]),
            F("topic_authorized_operations", "int32", "8+", default=-2147483648),
        ]),
        F("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
    ],
)

ControlledShutdown = api(
    # Broker -> controller (cluster mode), not a client API: no handler serves it on a standalone
    # broker, so ApiVersions never advertises it there. v0's request header has no client_id
    # (Kafka's non-standard header v0; framing knows). v1 = v0; v2 adds the broker epoch.
    7, "ControlledShutdown", versions="0-3", flexible="3+",
    request=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", "2+", default=-1),
    ],
    response=[
        F("error_code", "int16"),
        F("remaining_partitions", "[]RemainingPartition", fields=[
            F("topic_name", "string"),
            F("partition_index", "int32"),
        ]),
    ],
)

OffsetCommit = api(
    8, "OffsetCommit", versions="2-7", flexible="8+",
    request=[
        F("group_id", "string"),
        F("generation_id_or_member_epoch", "int32", "1+", default=-1),
        F("member_id", "string", "1+"),
        F("group_instance_id", "string", "7+", nullable="7+", default=None),
        F("retention_time_ms", "int64", "2-4", default=-1),
        F("topics", "[]OffsetCommitRequestTopic", fields=[
            F("name", "string", "0-9"),
            F("partitions", "[]OffsetCommitRequestPartition", fields=[
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "6+", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F("topics", "[]OffsetCommitResponseTopic", fields=[
            F("name", "string", "0-9"),
            F("partitions", "[]OffsetCommitResponsePartition", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

OffsetFetch = api(
    9, "OffsetFetch", versions="1-7", flexible="6+",
    request=[
        F("group_id", "string", "0-7"),
        F("topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
            F("name", "string", "0-7"),
            F("partition_indexes", "[]int32", "0-7"),
        ]),
        F("require_stable", "bool", "7+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F("topics", "[]OffsetFetchResponseTopic", "0-7", fields=[
            F("name", "string", "0-7"),
            F("partitions", "[]OffsetFetchResponsePartition", "0-7", fields=[
                F("partition_index", "int32", "0-7"),
                F("committed_offset", "int64", "0-7"),
                F("committed_leader_epoch", "int32", "5-7", default=-1),
                F("metadata", "string", "0-7", nullable="0-7"),
                F("error_code", "int16", "0-7"),
            ]),
        ]),
        F("error_code", "int16", "2-7"),
    ],
)

FindCoordinator = api(
    10, "FindCoordinator", versions="0-2", flexible="3+",
    request=[
        F("key", "string", "0-3"),
        F("key_type", "int8", "1+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0-3"),
        F("error_message", "string", "1-3", nullable="1-3"),
        F("node_id", "int32", "0-3"),
        F("host", "string", "0-3"),
        F("port", "int32", "0-3"),
    ],
)

JoinGroup = api(
    11, "JoinGroup", versions="0-5", flexible="6+",
    request=[
        F("group_id", "string"),
        F("session_timeout_ms", "int32"),
        F("rebalance_timeout_ms", "int32", "1+", default=-1),
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", nullable="5+", default=None),
        F("protocol_type", "string"),
        F("protocols", "[]JoinGroupRequestProtocol", fields=[
            F("name", "string"),
            F("metadata", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("error_code", "int16"),
        F("generation_id", "int32", default=-1),
        F("protocol_name", "string"),
        F("leader", "string"),
        F("member_id", "string"),
        F("members", "[]JoinGroupResponseMember", fields=[
            F("member_id", "string"),
            F("group_instance_id", "string", "5+", nullable="5+", default=None),
            F("metadata", "bytes"),
        ]),
    ],
)

Heartbeat = api(
    12, "Heartbeat", versions="0-3", flexible="4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
    ],
)

LeaveGroup = api(
    13, "LeaveGroup", versions="0-3", flexible="4+",
    request=[
        F("group_id", "string"),
        F("member_id", "string", "0-2"),
        F("members", "[]MemberIdentity", "3+", fields=[
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", nullable="3+", default=None),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("members", "[]MemberResponse", "3+", fields=[
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", nullable="3+"),
            F("error_code", "int16", "3+"),
        ]),
    ],
)

SyncGroup = api(
    14, "SyncGroup", versions="0-3", flexible="4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("assignments", "[]SyncGroupRequestAssignment", fields=[
            F("member_id", "string"),
            F("assignment", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("assignment", "bytes"),
    ],
)

DescribeGroups = api(
    15, "DescribeGroups", versions="0-4", flexible="5+",
    request=[
        F("groups", "[]string"),
        F("include_authorized_operations", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("groups", "[]DescribedGroup", fields=[
            F("error_code", "int16"),
            F("group_id", "string"),
            F("group_state", "string"),
            F("protocol_type", "string"),
            F("protocol_data", "string"),
            F("members", "[]DescribedGroupMember", fields=[
                F("member_id", "string"),
                F("group_instance_id", "string", "4+", nullable="4+", default=None),
                F("client_id", "string"),
                F("client_host", "string"),
                F("member_metadata", "bytes"),
                F("member_assignment", "bytes"),
            ]),
            F("authorized_operations", "int32", "3+", default=-2147483648),
        ]),
    ],
)

ListGroups = api(
    16, "ListGroups", versions="0-5", flexible="3+",
    request=[
        F("states_filter", "[]string", "4+"),
        F("types_filter", "[]string", "5+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("groups", "[]ListedGroup", fields=[
            F("group_id", "string"),
            F("protocol_type", "string"),
            F("group_state", "string", "4+"),
            F("group_type", "string", "5+"),
        ]),
    ],
)

ApiVersions = api(
    18, "ApiVersions", versions="0-3", flexible="3+",
    request=[
        F("client_software_name", "string", "3+"),
        F("client_software_version", "string", "3+"),
    ],
    response=[
        F("error_code", "int16"),
        F("api_keys", "[]ApiVersion", fields=[
            F("api_key", "int16"),
            F("min_version", "int16"),
            F("max_version", "int16"),
        ]),
        F("throttle_time_ms", "int32", "1+"),
        F("supported_features", "[]SupportedFeatureKey", "3+", tag=0, fields=[
            F("name", "string", "3+"),
            F("min_version", "int16", "3+"),
            F("max_version", "int16", "3+"),
        ]),
        F("finalized_features_epoch", "int64", "3+", default=-1, tag=1),
        F("finalized_features", "[]FinalizedFeatureKey", "3+", tag=2, fields=[
            F("name", "string", "3+"),
            F("max_version_level", "int16", "3+"),
            F("min_version_level", "int16", "3+"),
        ]),
        F("zk_migration_ready", "bool", "3+", tag=3),
    ],
)

CreateTopics = api(
    19, "CreateTopics", versions="0-4", flexible="5+",
    request=[
        F("topics", "[]CreatableTopic", fields=[
            F("name", "string"),
            F("num_partitions", "int32"),
            F("replication_factor", "int16"),
            F("assignments", "[]CreatableReplicaAssignment", fields=[
                F("partition_index", "int32"),
                F("broker_ids", "[]int32"),
            ]),
            F("configs", "[]CreatableTopicConfig", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("timeout_ms", "int32", default=60000),
        F("validate_only", "bool", "1+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", "[]CreatableTopicResult", fields=[
            F("name", "string"),
            F("error_code", "int16"),
            F("error_message", "string", "1+", nullable="0+"),
        ]),
    ],
)

DeleteTopics = api(
    20, "DeleteTopics", versions="0-6", flexible="4+",
    request=[
        F("topics", "[]DeleteTopicState", "6+", fields=[
            F("name", "string", "6+", nullable="6+", default=None),
            F("topic_id", "uuid", "6+"),
        ]),
        F("topic_names", "[]string", "0-5"),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("responses", "[]DeletableTopicResult", fields=[
            F("name", "string", nullable="6+"),
            F("topic_id", "uuid", "6+"),
            F("error_code", "int16"),
            F("error_message", "string", "5+", nullable="5+", default=None),
        ]),
    ],
)

DeleteRecords = api(
    21, "DeleteRecords", versions="0-1", flexible="2+",
    request=[
        F("topics", "[]DeleteRecordsTopic", fields=[
            F("name", "string"),
            F("partitions", "[]DeleteRecordsPartition", fields=[
                F("partition_index", "int32"),
                F("offset", "int64"),
            ]),
        ]),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]DeleteRecordsTopicResult", fields=[
            F("name", "string"),
            F("partitions", "[]DeleteRecordsPartitionResult", fields=[
                F("partition_index", "int32"),
                F("low_watermark", "int64"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

InitProducerId = api(
    22, "InitProducerId", versions="0-4", flexible="2+",
    request=[
        F("transactional_id", "string", nullable="0+"),
        F("transaction_timeout_ms", "int32"),
        # KIP-360: the producer's current id and epoch, to bump its epoch after an error.
        F("producer_id", "int64", "3+", default=-1),
        F("producer_epoch", "int16", "3+", default=-1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", default=-1),
        F("producer_epoch", "int16"),
    ],
)

OffsetForLeaderEpoch = api(
    23, "OffsetForLeaderEpoch", versions="0-3", flexible="4+",
    request=[
        # -2 (the default, and what v0-2 mean): a debugging client; -1 a consumer; >= 0 a broker.
        F("replica_id", "int32", "3+", default=-2),
        F("topics", "[]OffsetForLeaderTopic", fields=[
            F("topic", "string"),
            F("partitions", "[]OffsetForLeaderPartition", fields=[
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "2+", default=-1),
                F("leader_epoch", "int32"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", "[]OffsetForLeaderTopicResult", fields=[
            F("topic", "string"),
            F("partitions", "[]EpochEndOffset", fields=[
                F("error_code", "int16"),
                F("partition", "int32"),
                F("leader_epoch", "int32", "1+", default=-1),
                F("end_offset", "int64", default=-1),
            ]),
        ]),
    ],
)

DescribeConfigs = api(
    32, "DescribeConfigs", versions="0-4", flexible="4+",
    request=[
        F("resources", "[]DescribeConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configuration_keys", "[]string", nullable="0+"),
        ]),
        F("include_synonyms", "bool", "1+"),
        F("include_documentation", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]DescribeConfigsResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]DescribeConfigsResourceResult", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
                F("read_only", "bool"),
                F("is_default", "bool", "0"),
                F("config_source", "int8", "1+", default=-1),
                F("is_sensitive", "bool"),
                F("synonyms", "[]DescribeConfigsSynonym", "1+", fields=[
                    F("name", "string", "1+"),
                    F("value", "string", "1+", nullable="0+"),
                    F("source", "int8", "1+"),
                ]),
                F("config_type", "int8", "3+"),
                F("documentation", "string", "3+", nullable="0+", default=None),
            ]),
        ]),
    ],
)

AlterConfigs = api(
    33, "AlterConfigs", versions="0-2", flexible="2+",
    request=[
        F("resources", "[]AlterConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]AlterableConfig", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("responses", "[]AlterConfigsResourceResponse", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)

DescribeLogDirs = api(
    35, "DescribeLogDirs", versions="0-4", flexible="2+",
    request=[
        F("topics", "[]DescribableLogDirTopic", nullable="0+", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "3+"),
        F("results", "[]DescribeLogDirsResult", fields=[
            F("error_code", "int16"),
            F("log_dir", "string"),
            F("topics", "[]DescribeLogDirsTopic", fields=[
                F("name", "string"),
                F("partitions", "[]DescribeLogDirsPartition", fields=[
                    F("partition_index", "int32"),
                    F("partition_size", "int64"),
                    F("offset_lag", "int64"),
                    F("is_future_key", "bool"),
                ]),
            ]),
            F("total_bytes", "int64", "4+", default=-1),
            F("usable_bytes", "int64", "4+", default=-1),
        ]),
    ],
)

CreatePartitions = api(
    37, "CreatePartitions", versions="0-3", flexible="2+",
    request=[
        F("topics", "[]CreatePartitionsTopic", fields=[
            F("name", "string"),
            F("count", "int32"),
            F("assignments", "[]CreatePartitionsAssignment", nullable="0+", fields=[
                F("broker_ids", "[]int32"),
            ]),
        ]),
        F("timeout_ms", "int32"),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]CreatePartitionsTopicResult", fields=[
            F("name", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)

IncrementalAlterConfigs = api(
    44, "IncrementalAlterConfigs", versions="0-1", flexible="1+",
    request=[
        F("resources", "[]AlterConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]AlterableConfig", fields=[
                F("name", "string"),
                F("config_operation", "int8"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("responses", "[]AlterConfigsResourceResponse", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)

ElectLeaders = api(
    43, "ElectLeaders", versions="0-2", flexible="2+",
    request=[
        F("election_type", "int8", "1+"),
        F("topic_partitions", "[]TopicPartitions", nullable="0+", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
        F("timeout_ms", "int32", default=60000),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "1+"),
        F("replica_election_results", "[]ReplicaElectionResult", fields=[
            F("topic", "string"),
            F("partition_result", "[]PartitionResult", fields=[
                F("partition_id", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
            ]),
        ]),
    ],
)

AlterPartitionReassignments = api(
    45, "AlterPartitionReassignments", versions="0", flexible="0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        F("topics", "[]ReassignableTopic", fields=[
            F("name", "string"),
            F("partitions", "[]ReassignablePartition", fields=[
                F("partition_index", "int32"),
                F("replicas", "[]int32", nullable="0+", default=None),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("responses", "[]ReassignableTopicResponse", fields=[
            F("name", "string"),
            F("partitions", "[]ReassignablePartitionResponse", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
            ]),
        ]),
    ],
)

ListPartitionReassignments = api(
    46, "ListPartitionReassignments", versions="0", flexible="0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        F("topics", "[]ListPartitionReassignmentsTopics", nullable="0+", default=None, fields=[
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("topics", "[]OngoingTopicReassignment", fields=[
            F("name", "string"),
            F("partitions", "[]OngoingPartitionReassignment", fields=[
                F("partition_index", "int32"),
                F("replicas", "[]int32"),
                F("adding_replicas", "[]int32"),
                F("removing_replicas", "[]int32"),
            ]),
        ]),
    ],
)

DeleteGroups = api(
    42, "DeleteGroups", versions="0-1", flexible="2+",
    request=[
        F("groups_names", "[]string"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]DeletableGroupResult", fields=[
            F("group_id", "string"),
            F("error_code", "int16"),
        ]),
    ],
)

OffsetDelete = api(
    47, "OffsetDelete", versions="0", flexible="none",
    request=[
        F("group_id", "string"),
        F("topics", "[]OffsetDeleteRequestTopic", fields=[
            F("name", "string"),
            F("partitions", "[]OffsetDeleteRequestPartition", fields=[
                F("partition_index", "int32"),
            ]),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        F("throttle_time_ms", "int32"),
        F("topics", "[]OffsetDeleteResponseTopic", fields=[
            F("name", "string"),
            F("partitions", "[]OffsetDeleteResponsePartition", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

DescribeCluster = api(
    60, "DescribeCluster", versions="0-1", flexible="0+",
    request=[
        F("include_cluster_authorized_operations", "bool"),
        F("endpoint_type", "int8", "1+", default=1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("endpoint_type", "int8", "1+", default=1),
        F("cluster_id", "string"),
        F("controller_id", "int32", default=-1),
        F("brokers", "[]DescribeClusterBroker", fields=[
            F("broker_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", nullable="0+", default=None),
        ]),
        F("cluster_authorized_operations", "int32", default=-2147483648),
    ],
)

SaslHandshake = api(
    17, "SaslHandshake", versions="0-1", flexible="none",
    request=[
        F("mechanism", "string"),
    ],
    response=[
        F("error_code", "int16"),
        F("mechanisms", "[]string"),
    ],
)

SaslAuthenticate = api(
    36, "SaslAuthenticate", versions="0-2", flexible="2+",
    request=[
        F("auth_bytes", "bytes"),
    ],
    response=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("auth_bytes", "bytes"),
        F("session_lifetime_ms", "int64", "1+"),
    ],
)

DescribeAcls = api(
    29, "DescribeAcls", versions="0-3", flexible="2+",
    request=[
        F("resource_type_filter", "int8"),
        F("resource_name_filter", "string", nullable="0+", default=None),
        F("pattern_type_filter", "int8", "1+", default=3),
        F("principal_filter", "string", nullable="0+", default=None),
        F("host_filter", "string", nullable="0+", default=None),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("resources", "[]DescribeAclsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=3),
            F("acls", "[]AclDescription", fields=[
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

CreateAcls = api(
    30, "CreateAcls", versions="0-3", flexible="2+",
    request=[
        F("creations", "[]AclCreation", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("resource_pattern_type", "int8", "1+", default=3),
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AclCreationResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)

DeleteAcls = api(
    31, "DeleteAcls", versions="0-3", flexible="2+",
    request=[
        F("filters", "[]DeleteAclsFilter", fields=[
            F("resource_type_filter", "int8"),
            F("resource_name_filter", "string", nullable="0+", default=None),
            F("pattern_type_filter", "int8", "1+", default=3),
            F("principal_filter", "string", nullable="0+", default=None),
            F("host_filter", "string", nullable="0+", default=None),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("filter_results", "[]DeleteAclsFilterResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("matching_acls", "[]DeleteAclsMatchingAcl", fields=[
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("pattern_type", "int8", "1+", default=3),
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

DescribeClientQuotas = api(
    48, "DescribeClientQuotas", versions="0-1", flexible="1+",
    request=[
        F("components", "[]ComponentData", fields=[
            F("entity_type", "string"),
            F("match_type", "int8"),
            F("match", "string", nullable="0+", default=None),
        ]),
        F("strict", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("entries", "[]EntryData", nullable="0+", default=None, fields=[
            F("entity", "[]EntityData", fields=[
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+", default=None),
            ]),
            F("values", "[]ValueData", fields=[
                F("key", "string"),
                F("value", "float64"),
            ]),
        ]),
    ],
)

AlterClientQuotas = api(
    49, "AlterClientQuotas", versions="0-1", flexible="1+",
    request=[
        F("entries", "[]EntryData", fields=[
            F("entity", "[]EntityData", fields=[
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+", default=None),
            ]),
            F("ops", "[]OpData", fields=[
                F("key", "string"),
                F("value", "float64"),
                F("remove", "bool"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("entries", "[]EntryData", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("entity", "[]EntityData", fields=[
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+", default=None),
            ]),
        ]),
    ],
)

DescribeUserScramCredentials = api(
    50, "DescribeUserScramCredentials", versions="0", flexible="0+",
    request=[
        F("users", "[]UserName", nullable="0+", default=None, fields=[
            F("name", "string"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("results", "[]DescribeUserScramCredentialsResult", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("credential_infos", "[]CredentialInfo", fields=[
                F("mechanism", "int8"),
                F("iterations", "int32"),
            ]),
        ]),
    ],
)

AlterUserScramCredentials = api(
    51, "AlterUserScramCredentials", versions="0", flexible="0+",
    request=[
        F("deletions", "[]ScramCredentialDeletion", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
        ]),
        F("upsertions", "[]ScramCredentialUpsertion", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
            F("iterations", "int32"),
            F("salt", "bytes"),
            F("salted_password", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AlterUserScramCredentialsResult", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)

AddPartitionsToTxn = api(
    24, "AddPartitionsToTxn", versions="0-3", flexible="3+",
    request=[
        # v4+ (KIP-890: several transactions per request, from brokers) is not implemented.
        F("v3_and_below_transactional_id", "string", "0-3"),
        F("v3_and_below_producer_id", "int64", "0-3"),
        F("v3_and_below_producer_epoch", "int16", "0-3"),
        F("v3_and_below_topics", "[]AddPartitionsToTxnTopic", "0-3", fields=[
            F("name", "string"),
            F("partitions", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results_by_topic_v3_and_below", "[]AddPartitionsToTxnTopicResult", "0-3", fields=[
            F("name", "string"),
            F("results_by_partition", "[]AddPartitionsToTxnPartitionResult", fields=[
                F("partition_index", "int32"),
                F("partition_error_code", "int16"),
            ]),
        ]),
    ],
)

AddOffsetsToTxn = api(
    25, "AddOffsetsToTxn", versions="0-3", flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("group_id", "string"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
    ],
)

EndTxn = api(
    26, "EndTxn", versions="0-3", flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("committed", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
    ],
)

DescribeTransactions = api(
    65, "DescribeTransactions", versions="0", flexible="0+",
    request=[
        F("transactional_ids", "[]string"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("transaction_states", "[]TransactionState", fields=[
            F("error_code", "int16"),
            F("transactional_id", "string"),
            F("transaction_state", "string"),
            F("transaction_timeout_ms", "int32"),
            F("transaction_start_time_ms", "int64"),
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("topics", "[]TopicData", fields=[
                F("topic", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ],
)

ListTransactions = api(
    66, "ListTransactions", versions="0", flexible="0+",
    request=[
        F("state_filters", "[]string"),
        F("producer_id_filters", "[]int64"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("unknown_state_filters", "[]string"),
        F("transaction_states", "[]TransactionState", fields=[
            F("transactional_id", "string"),
            F("producer_id", "int64"),
            F("transaction_state", "string"),
        ]),
    ],
)

WriteTxnMarkers = api(
    27, "WriteTxnMarkers", versions="0-1", flexible="1+",
    request=[
        F("markers", "[]WritableTxnMarker", fields=[
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("transaction_result", "bool"),
            F("topics", "[]WritableTxnMarkerTopic", fields=[
                F("name", "string"),
                F("partition_indexes", "[]int32"),
            ]),
            F("coordinator_epoch", "int32"),
        ]),
    ],
    response=[
        F("markers", "[]WritableTxnMarkerResult", fields=[
            F("producer_id", "int64"),
            F("topics", "[]WritableTxnMarkerTopicResult", fields=[
                F("name", "string"),
                F("partitions", "[]WritableTxnMarkerPartitionResult", fields=[
                    F("partition_index", "int32"),
                    F("error_code", "int16"),
                ]),
            ]),
        ]),
    ],
)

TxnOffsetCommit = api(
    28, "TxnOffsetCommit", versions="0-3", flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("group_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("generation_id", "int32", "3+", default=-1),
        F("member_id", "string", "3+", default=""),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("topics", "[]TxnOffsetCommitRequestTopic", fields=[
            F("name", "string"),
            F("partitions", "[]TxnOffsetCommitRequestPartition", fields=[
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "2+", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]TxnOffsetCommitResponseTopic", fields=[
            F("name", "string"),
            F("partitions", "[]TxnOffsetCommitResponsePartition", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

DescribeConfigs = api(
    32, "DescribeConfigs", versions="0-4", flexible="4+",
    request=[
        F("resources", "[]DescribeConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configuration_keys", "[]string", nullable="0+"),
        ]),
        F("include_synonyms", "bool", "1+"),
        F("include_documentation", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]DescribeConfigsResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]DescribeConfigsResourceResult", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
                F("read_only", "bool"),
                F("is_default", "bool", "0"),
                F("config_source", "int8", "1+", default=-1),
                F("is_sensitive", "bool"),
                F("synonyms", "[]DescribeConfigsSynonym", "1+", fields=[
                    F("name", "string", "1+"),
                    F("value", "string", "1+", nullable="0+"),
                    F("source", "int8", "1+"),
                ]),
                F("config_type", "int8", "3+"),
                F("documentation", "string", "3+", nullable="0+", default=None),
            ]),
        ]),
    ],
)

AlterConfigs = api(
    33, "AlterConfigs", versions="0-2", flexible="2+",
    request=[
        F("resources", "[]AlterConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]AlterableConfig", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("responses", "[]AlterConfigsResourceResponse", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)

DescribeLogDirs = api(
    35, "DescribeLogDirs", versions="0-4", flexible="2+",
    request=[
        F("topics", "[]DescribableLogDirTopic", nullable="0+", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "3+"),
        F("results", "[]DescribeLogDirsResult", fields=[
            F("error_code", "int16"),
            F("log_dir", "string"),
            F("topics", "[]DescribeLogDirsTopic", fields=[
                F("name", "string"),
                F("partitions", "[]DescribeLogDirsPartition", fields=[
                    F("partition_index", "int32"),
                    F("partition_size", "int64"),
                    F("offset_lag", "int64"),
                    F("is_future_key", "bool"),
                ]),
            ]),
            F("total_bytes", "int64", "4+", default=-1),
            F("usable_bytes", "int64", "4+", default=-1),
        ]),
    ],
)

CreatePartitions = api(
    37, "CreatePartitions", versions="0-3", flexible="2+",
    request=[
        F("topics", "[]CreatePartitionsTopic", fields=[
            F("name", "string"),
            F("count", "int32"),
            F("assignments", "[]CreatePartitionsAssignment", nullable="0+", fields=[
                F("broker_ids", "[]int32"),
            ]),
        ]),
        F("timeout_ms", "int32"),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]CreatePartitionsTopicResult", fields=[
            F("name", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)

IncrementalAlterConfigs = api(
    44, "IncrementalAlterConfigs", versions="0-1", flexible="1+",
    request=[
        F("resources", "[]AlterConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]AlterableConfig", fields=[
                F("name", "string"),
                F("config_operation", "int8"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("responses", "[]AlterConfigsResourceResponse", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)

DeleteGroups = api(
    42, "DeleteGroups", versions="0-1", flexible="2+",
    request=[
        F("groups_names", "[]string"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]DeletableGroupResult", fields=[
            F("group_id", "string"),
            F("error_code", "int16"),
        ]),
    ],
)

OffsetDelete = api(
    47, "OffsetDelete", versions="0", flexible="none",
    request=[
        F("group_id", "string"),
        F("topics", "[]OffsetDeleteRequestTopic", fields=[
            F("name", "string"),
            F("partitions", "[]OffsetDeleteRequestPartition", fields=[
                F("partition_index", "int32"),
            ]),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        F("throttle_time_ms", "int32"),
        F("topics", "[]OffsetDeleteResponseTopic", fields=[
            F("name", "string"),
            F("partitions", "[]OffsetDeleteResponsePartition", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

DescribeCluster = api(
    60, "DescribeCluster", versions="0-1", flexible="0+",
    request=[
        F("include_cluster_authorized_operations", "bool"),
        F("endpoint_type", "int8", "1+", default=1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("endpoint_type", "int8", "1+", default=1),
        F("cluster_id", "string"),
        F("controller_id", "int32", default=-1),
        F("brokers", "[]DescribeClusterBroker", fields=[
            F("broker_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", nullable="0+", default=None),
        ]),
        F("cluster_authorized_operations", "int32", default=-2147483648),
    ],
)

SaslHandshake = api(
    17, "SaslHandshake", versions="0-1", flexible="none",
    request=[
        F("mechanism", "string"),
    ],
    response=[
        F("error_code", "int16"),
        F("mechanisms", "[]string"),
    ],
)

SaslAuthenticate = api(
    36, "SaslAuthenticate", versions="0-2", flexible="2+",
    request=[
        F("auth_bytes", "bytes"),
    ],
    response=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("auth_bytes", "bytes"),
        F("session_lifetime_ms", "int64", "1+"),
    ],
)

DescribeAcls = api(
    29, "DescribeAcls", versions="0-3", flexible="2+",
    request=[
        F("resource_type_filter", "int8"),
        F("resource_name_filter", "string", nullable="0+", default=None),
        F("pattern_type_filter", "int8", "1+", default=3),
        F("principal_filter", "string", nullable="0+", default=None),
        F("host_filter", "string", nullable="0+", default=None),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("resources", "[]DescribeAclsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=3),
            F("acls", "[]AclDescription", fields=[
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

CreateAcls = api(
    30, "CreateAcls", versions="0-3", flexible="2+",
    request=[
        F("creations", "[]AclCreation", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("resource_pattern_type", "int8", "1+", default=3),
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AclCreationResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)

DeleteAcls = api(
    31, "DeleteAcls", versions="0-3", flexible="2+",
    request=[
        F("filters", "[]DeleteAclsFilter", fields=[
            F("resource_type_filter", "int8"),
            F("resource_name_filter", "string", nullable="0+", default=None),
            F("pattern_type_filter", "int8", "1+", default=3),
            F("principal_filter", "string", nullable="0+", default=None),
            F("host_filter", "string", nullable="0+", default=None),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("filter_results", "[]DeleteAclsFilterResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("matching_acls", "[]DeleteAclsMatchingAcl", fields=[
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("pattern_type", "int8", "1+", default=3),
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

DescribeUserScramCredentials = api(
    50, "DescribeUserScramCredentials", versions="0", flexible="0+",
    request=[
        F("users", "[]UserName", nullable="0+", default=None, fields=[
            F("name", "string"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("results", "[]DescribeUserScramCredentialsResult", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("credential_infos", "[]CredentialInfo", fields=[
                F("mechanism", "int8"),
                F("iterations", "int32"),
            ]),
        ]),
    ],
)

AlterUserScramCredentials = api(
    51, "AlterUserScramCredentials", versions="0", flexible="0+",
    request=[
        F("deletions", "[]ScramCredentialDeletion", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
        ]),
        F("upsertions", "[]ScramCredentialUpsertion", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
            F("iterations", "int32"),
            F("salt", "bytes"),
            F("salted_password", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AlterUserScramCredentialsResult", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)

DescribeProducers = api(
    61, "DescribeProducers", versions="0", flexible="0+",
    request=[
        F("topics", "[]TopicRequest", fields=[
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]TopicResponse", fields=[
            F("name", "string"),
            F("partitions", "[]PartitionResponse", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("active_producers", "[]ProducerState", fields=[
                    F("producer_id", "int64"),
                    F("producer_epoch", "int32"),
                    F("last_sequence", "int32", default=-1),
                    F("last_timestamp", "int64", default=-1),
                    F("coordinator_epoch", "int32"),
                    F("current_txn_start_offset", "int64", default=-1),
                ]),
            ]),
        ]),
    ],
)

DescribeTopicPartitions = api(
    # What Kafka 3.9's Admin.describeTopics (kafka-topics --describe) asks first, paging through
    # the partitions with a cursor; it falls back to Metadata only if the broker lacks it.
    75, "DescribeTopicPartitions", versions="0", flexible="0+",
    request=[
        F("topics", "[]TopicRequest", fields=[
            F("name", "string"),
        ]),
        F("response_partition_limit", "int32", default=2000),
        F("cursor", "Cursor", nullable="0+", default=None, fields=[
            F("topic_name", "string"),
            F("partition_index", "int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]DescribeTopicPartitionsResponseTopic", fields=[
            F("error_code", "int16"),
            F("name", "string", nullable="0+"),
            F("topic_id", "uuid"),
            F("is_internal", "bool"),
            F("partitions", "[]DescribeTopicPartitionsResponsePartition", fields=[
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", default=-1),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("eligible_leader_replicas", "[]int32", nullable="0+", default=None),
                F("last_known_elr", "[]int32", nullable="0+", default=None),
                F("offline_replicas", "[]int32"),
            ]),
            F("topic_authorized_operations", "int32", default=-2147483648),
        ]),
        F("next_cursor", "Cursor", nullable="0+", default=None, fields=[
            F("topic_name", "string"),
            F("partition_index", "int32"),
        ]),
    ],
)

# fmt: on

#: Every implemented API by key.
APIS: dict[int, Api] = {
    a.key: a
    for a in (
        Produce, Fetch, ListOffsets, Metadata, ControlledShutdown, OffsetCommit, OffsetFetch,
        FindCoordinator, JoinGroup, Heartbeat, LeaveGroup, SyncGroup, DescribeGroups, ListGroups,
        ApiVersions, CreateTopics, DeleteTopics, DeleteRecords, InitProducerId,
        OffsetForLeaderEpoch, DescribeConfigs, AlterConfigs, DescribeLogDirs, CreatePartitions,
        DeleteGroups, IncrementalAlterConfigs, OffsetDelete, DescribeCluster, SaslHandshake,
        SaslAuthenticate, DescribeAcls, CreateAcls, DeleteAcls, DescribeClientQuotas,
        AlterClientQuotas, DescribeUserScramCredentials, AlterUserScramCredentials, ElectLeaders,
        AlterPartitionReassignments, ListPartitionReassignments, AddPartitionsToTxn,
        AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions, WriteTxnMarkers,
        TxnOffsetCommit, DescribeProducers, DescribeTopicPartitions,
    )
}  # fmt: skip

# The classes, by name. Their fields are typed for mypy by the generated messages.pyi
# (python -m sluice.protocol.codegen after any change to a declaration).
RequestHeader = REQUEST_HEADER.cls
ResponseHeader = RESPONSE_HEADER.cls
ProduceRequest = Produce.request.cls
ProduceResponse = Produce.response.cls
FetchRequest = Fetch.request.cls
FetchResponse = Fetch.response.cls
ListOffsetsRequest = ListOffsets.request.cls
ListOffsetsResponse = ListOffsets.response.cls
MetadataRequest = Metadata.request.cls
MetadataResponse = Metadata.response.cls
ControlledShutdownRequest = ControlledShutdown.request.cls
ControlledShutdownResponse = ControlledShutdown.response.cls
OffsetCommitRequest = OffsetCommit.request.cls
OffsetCommitResponse = OffsetCommit.response.cls
OffsetFetchRequest = OffsetFetch.request.cls
OffsetFetchResponse = OffsetFetch.response.cls
FindCoordinatorRequest = FindCoordinator.request.cls
FindCoordinatorResponse = FindCoordinator.response.cls
JoinGroupRequest = JoinGroup.request.cls
JoinGroupResponse = JoinGroup.response.cls
HeartbeatRequest = Heartbeat.request.cls
HeartbeatResponse = Heartbeat.response.cls
LeaveGroupRequest = LeaveGroup.request.cls
LeaveGroupResponse = LeaveGroup.response.cls
SyncGroupRequest = SyncGroup.request.cls
SyncGroupResponse = SyncGroup.response.cls
DescribeGroupsRequest = DescribeGroups.request.cls
DescribeGroupsResponse = DescribeGroups.response.cls
ListGroupsRequest = ListGroups.request.cls
ListGroupsResponse = ListGroups.response.cls
ApiVersionsRequest = ApiVersions.request.cls
ApiVersionsResponse = ApiVersions.response.cls
CreateTopicsRequest = CreateTopics.request.cls
CreateTopicsResponse = CreateTopics.response.cls
DeleteTopicsRequest = DeleteTopics.request.cls
DeleteTopicsResponse = DeleteTopics.response.cls
DeleteRecordsRequest = DeleteRecords.request.cls
DeleteRecordsResponse = DeleteRecords.response.cls
InitProducerIdRequest = InitProducerId.request.cls
InitProducerIdResponse = InitProducerId.response.cls
OffsetForLeaderEpochRequest = OffsetForLeaderEpoch.request.cls
OffsetForLeaderEpochResponse = OffsetForLeaderEpoch.response.cls
DescribeLogDirsRequest = DescribeLogDirs.request.cls
DescribeLogDirsResponse = DescribeLogDirs.response.cls
CreatePartitionsRequest = CreatePartitions.request.cls
CreatePartitionsResponse = CreatePartitions.response.cls
ElectLeadersRequest = ElectLeaders.request.cls
ElectLeadersResponse = ElectLeaders.response.cls
AlterPartitionReassignmentsRequest = AlterPartitionReassignments.request.cls
AlterPartitionReassignmentsResponse = AlterPartitionReassignments.response.cls
ListPartitionReassignmentsRequest = ListPartitionReassignments.request.cls
ListPartitionReassignmentsResponse = ListPartitionReassignments.response.cls
DeleteGroupsRequest = DeleteGroups.request.cls
DeleteGroupsResponse = DeleteGroups.response.cls
DescribeConfigsRequest = DescribeConfigs.request.cls
DescribeConfigsResponse = DescribeConfigs.response.cls
AlterConfigsRequest = AlterConfigs.request.cls
AlterConfigsResponse = AlterConfigs.response.cls
IncrementalAlterConfigsRequest = IncrementalAlterConfigs.request.cls
IncrementalAlterConfigsResponse = IncrementalAlterConfigs.response.cls
OffsetDeleteRequest = OffsetDelete.request.cls
OffsetDeleteResponse = OffsetDelete.response.cls
DescribeClusterRequest = DescribeCluster.request.cls
DescribeClusterResponse = DescribeCluster.response.cls
SaslHandshakeRequest = SaslHandshake.request.cls
SaslHandshakeResponse = SaslHandshake.response.cls
SaslAuthenticateRequest = SaslAuthenticate.request.cls
SaslAuthenticateResponse = SaslAuthenticate.response.cls
DescribeAclsRequest = DescribeAcls.request.cls
DescribeAclsResponse = DescribeAcls.response.cls
CreateAclsRequest = CreateAcls.request.cls
CreateAclsResponse = CreateAcls.response.cls
DeleteAclsRequest = DeleteAcls.request.cls
DeleteAclsResponse = DeleteAcls.response.cls
DescribeClientQuotasRequest = DescribeClientQuotas.request.cls
DescribeClientQuotasResponse = DescribeClientQuotas.response.cls
AlterClientQuotasRequest = AlterClientQuotas.request.cls
AlterClientQuotasResponse = AlterClientQuotas.response.cls
DescribeUserScramCredentialsRequest = DescribeUserScramCredentials.request.cls
DescribeUserScramCredentialsResponse = DescribeUserScramCredentials.response.cls
AlterUserScramCredentialsRequest = AlterUserScramCredentials.request.cls
AlterUserScramCredentialsResponse = AlterUserScramCredentials.response.cls
AddPartitionsToTxnRequest = AddPartitionsToTxn.request.cls
AddPartitionsToTxnResponse = AddPartitionsToTxn.response.cls
AddOffsetsToTxnRequest = AddOffsetsToTxn.request.cls
AddOffsetsToTxnResponse = AddOffsetsToTxn.response.cls
EndTxnRequest = EndTxn.request.cls
EndTxnResponse = EndTxn.response.cls
DescribeTransactionsRequest = DescribeTransactions.request.cls
DescribeTransactionsResponse = DescribeTransactions.response.cls
ListTransactionsRequest = ListTransactions.request.cls
ListTransactionsResponse = ListTransactions.response.cls
WriteTxnMarkersRequest = WriteTxnMarkers.request.cls
WriteTxnMarkersResponse = WriteTxnMarkers.response.cls
TxnOffsetCommitRequest = TxnOffsetCommit.request.cls
TxnOffsetCommitResponse = TxnOffsetCommit.response.cls
DescribeProducersRequest = DescribeProducers.request.cls
DescribeProducersResponse = DescribeProducers.response.cls
DescribeTopicPartitionsRequest = DescribeTopicPartitions.request.cls
DescribeTopicPartitionsResponse = DescribeTopicPartitions.response.cls
