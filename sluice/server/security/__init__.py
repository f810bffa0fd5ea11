"""Kafka's security model for the broker: TLS, SASL (PLAIN, SCRAM), credentials and ACLs.

The modules (none imports the core; the core wires them in):

* :mod:`.tls` -- ``ssl.SSLContext`` for listeners and the inter-broker client from the
  ``ssl.*`` keys; the principal of a client certificate (``ssl.principal.mapping.rules``).
* :mod:`.authenticator` -- Kafka's ``SaslServerAuthenticator``: one sans-I/O state machine per
  connection, PLAIN and SCRAM-SHA-256/512, KIP-368 re-authentication.
* :mod:`.scram` -- SCRAM credentials in Kafka's text and the server side of an exchange.
* :mod:`.credentials` -- where credentials live: ``/config/users/<user>`` in ZooKeeper with
  change notices, or a file for a standalone broker; PLAIN is checked against them too.
* :mod:`.acl` / :mod:`.authorizer` -- the ACL model, the table of which API needs which
  operation on which resource, and ``AclAuthorizer`` over ``/kafka-acl*`` or a file.
* :mod:`.admin` -- CreateAcls / DescribeAcls / DeleteAcls and KIP-554's
  Describe/AlterUserScramCredentials as request -> response functions.
* :mod:`.listeners` -- security protocols and ``listener.name.<l>.`` overrides.
* :mod:`.notifications` -- Kafka's sequential change notices, followed by every broker.
* :mod:`.users` -- ``python -m sluice.server.security``: SCRAM users with kafka-configs' flags
  against the file or ZooKeeper, before a broker runs.
* :mod:`.files` -- the atomic, private file writer of the standalone stores.

How this is wired into the broker
=================================

Wired (``sluice.server.server``, ``sluice.server.network.connection`` / ``.listener``,
``sluice.net.security``, ``sluice.server.api.base.ApiBase.allowed`` and
``sluice.server.api.security``): configuration, start-up (one credential store for SASL logins
and the SCRAM admin APIs: the file standalone, ZooKeeper's in a cluster from the session's
start), the per-connection path, the inter-broker client and the authorizer's checks in the
handlers below; ``tests/security/`` runs them against real clients.

**Configuration** (Kafka's keys, read once by the core's config and handed down as plain
dicts): ``listeners``, ``advertised.listeners``, ``listener.security.protocol.map``,
``inter.broker.listener.name`` / ``security.inter.broker.protocol``; ``ssl.*`` and
``ssl.principal.mapping.rules``; ``sasl.enabled.mechanisms`` (Kafka's default is GSSAPI, which
Sluice does not have: a SASL listener without the key fails to load with a message naming
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512), ``sasl.mechanism.inter.broker.protocol``,
``sasl.server.max.receive.size`` (524288), ``connections.max.reauth.ms`` (0),
``connection.failed.authentication.delay.ms`` (100); ``authorizer.class.name`` (one of
:data:`.authorizer.AUTHORIZER_CLASS_NAMES`, anything else non-empty refuses to start),
``super.users``, ``allow.everyone.if.no.acl.found``. Each listener's settings are
:func:`.listeners.listener_settings` of the whole config; per-mechanism ones
:func:`.listeners.mechanism_settings`.

**Start-up**: for each SSL / SASL_SSL listener build :func:`.tls.server_context` and pass it to
``create_server(ssl=...)`` (asyncio completes the handshake before ``connection_made``, so a
plaintext client on a TLS port never reaches the protocol object). Cluster mode: after the
ZooKeeper session, ``ZkCredentialStore(zk).start()`` and, with an authorizer,
``ZkAclStore(zk).start()`` (both create Kafka's paths and follow the notices). Standalone:
``FileCredentialStore`` / ``FileAclStore`` on ``users.json`` / ``sluice-acls.json`` in the log
directory (``sluice.security.credentials.file`` moves the credentials); ``python -m
sluice.server.security`` and ``sluice configs --entity-type users`` write the credentials file
or ZooKeeper, before the first start or while the broker runs.

**Per connection** (the protocol object gains a small security state):

1. principal ``User:ANONYMOUS`` on PLAINTEXT; on SSL :func:`.tls.ssl_principal` of
   ``ssl_object.getpeercert(binary_form=True)``;
2. on SASL listeners an :class:`.authenticator.SaslServerAuthenticator` (the broker's
   ApiVersions response as ``api_versions``); while it is ``authenticating`` the frame reader's
   ``max_frame_size`` is the authenticator's, every frame goes to ``receive`` and the connection
   writes ``step.send``; ``step.close`` closes after the writes, delayed by
   ``connection.failed.authentication.delay.ms`` when ``step.failed`` (reading paused
   meanwhile); a ``FrameTooLarge`` goes to ``frame_too_large``. PLAIN costs one PBKDF2 per
   login (4096 iterations, milliseconds: ``bench/security.py``), so ``receive`` of a PLAIN
   SaslAuthenticate frame runs in the default executor. When ``step.authenticated``, the
   principal becomes ``auth.principal`` and the normal path resumes with the reader's own
   limit;
3. afterwards, before each request: ``auth.session_expired()`` closes the connection (Kafka
   logs it and the client reconnects); a SaslHandshake goes to ``begin_reauthentication`` and
   to the handlers only when that returns ``None`` (they answer ILLEGAL_SASL_STATE, and
   SaslAuthenticate after authentication ILLEGAL_SASL_STATE with "SaslAuthenticate request
   received after successful authentication", as ``KafkaApis``).

**Handlers** receive a request context (principal, client host, listener). With no authorizer
nothing changes. With one, each handler checks the rows :func:`.acl.operations_for` lists for
its API with ``authorizer.authorize(principal, host, op, resource_type, name)`` and answers
:func:`.acl.authorization_error` of the resource type -- per partition for Produce, Fetch,
ListOffsets, OffsetCommit, OffsetFetch, DeleteRecords, OffsetForLeaderEpoch; per topic for
CreateTopics (Create on the cluster or on the topic), DeleteTopics, CreatePartitions, configs;
per group for the group APIs; on the cluster for ACL, SCRAM, DescribeCluster and replication
APIs. Metadata leaves out topics the principal may not Describe (an explicitly named one gets
TOPIC_AUTHORIZATION_FAILED); the authorized-operations fields of Metadata, DescribeGroups and
DescribeCluster become ``sluice.protocol.acl.to_bitfield(authorizer.authorized_operations(...))``;
an idempotent producer's InitProducerId needs IdempotentWrite on the cluster or, failing that,
``authorize_by_resource_type(..., WRITE, TOPIC)`` (KIP-679). APIs 29-31 and 50-51 call
:mod:`.admin` after their cluster check.

**Inter-broker**: replica fetchers and controller requests connect to
``inter.broker.listener.name`` with :func:`.tls.client_context` of that listener's settings and
authenticate with ``sasl.mechanism.inter.broker.protocol`` (scramp's client, or the PLAIN
token) as the broker's user -- ``listener.name.<l>.<mechanism>.sasl.jaas.config``'s
``username`` / ``password``, Kafka's place for it -- who belongs in ``super.users``.

Not covered: GSSAPI and OAUTHBEARER, delegation tokens, JKS keystores (convert to PKCS#12),
restricting TLS 1.3 suites, certificate reload, SASLprep of passwords (none of Kafka, librdkafka
or kafka-python applies it either).
"""
