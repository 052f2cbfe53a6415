package abi

// Exports a plugin provides (host → plugin). Each takes its JSON request as the Extism input and
// writes its JSON reply as the Extism output; a failure is reported with Extism's error_set and a
// non-zero return, its message being a JSON Error when it parses as one.
const (
	ExportDescribe  = "describe"  // () → Manifest; required of every plugin
	ExportConfigure = "configure" // ConfigureRequest → ConfigureResult; required of every plugin
	ExportWebhook   = "webhook"   // WebhookRequest → WebhookResult; capability "webhook"
	ExportPoll      = "poll"      // PollRequest → PollResult; capability "poll"
	ExportSend      = "send"      // SendRequest → SendResult; required of platform plugins
	ExportTick      = "tick"      // TickRequest → TickResult; required of scheduler plugins
	ExportJobs      = "jobs"      // JobsRequest → JobsResult; capability "jobs" (ABI 1.1)
	ExportFetch     = "fetch"     // FetchRequest → FetchResult; capability "attachments" (ABI 1.2)
)

// HostNamespace is the Wasm import module that holds every host function. It is Extism's user
// namespace, so any Extism PDK can declare the imports.
const HostNamespace = "extism:host/user"

// Host functions (plugin → host). Each takes one Extism memory offset holding a JSON request and
// returns one offset holding a JSON Reply. None of them traps the guest on failure: errors come
// back inside the Reply.
const (
	HostLog   = "hermes_log"   // LogRequest → {}
	HostClock = "hermes_clock" // {} → ClockReply

	HostKVGet    = "hermes_kv_get"    // KVGetRequest → KVGetReply
	HostKVSet    = "hermes_kv_set"    // KVSetRequest → {}
	HostKVDelete = "hermes_kv_delete" // KVDeleteRequest → {}

	HostHTTP = "hermes_http" // HTTPRequest → HTTPResponse

	HostWSOpen  = "hermes_ws_open"  // WSOpenRequest → WSOpenReply
	HostWSSend  = "hermes_ws_send"  // WSSendRequest → {}
	HostWSRecv  = "hermes_ws_recv"  // WSRecvRequest → WSRecvReply
	HostWSClose = "hermes_ws_close" // WSCloseRequest → {}

	HostSessionResolve = "hermes_session_resolve" // SessionRequest → SessionRef
	HostSessionObserve = "hermes_session_observe" // ObserveRequest → SessionRef
	HostSessionRedact  = "hermes_session_redact"  // RedactRequest → RedactReply
	HostSessionSeed    = "hermes_session_seed"    // SeedRequest → SessionRef
	HostDispatch       = "hermes_dispatch"        // DispatchRequest → DispatchReply
	HostSend           = "hermes_send"            // HostSendRequest → HostSendReply
	HostAgent          = "hermes_agent"           // AgentRequest → AgentReply (ABI 1.1)
)

// HostFunctions returns every host function of this ABI version, in a stable order. Each call
// returns a new slice, so no caller can change what another sees.
func HostFunctions() []string {
	return []string{
		HostLog, HostClock,
		HostKVGet, HostKVSet, HostKVDelete,
		HostHTTP,
		HostWSOpen, HostWSSend, HostWSRecv, HostWSClose,
		HostSessionResolve, HostSessionObserve, HostSessionRedact, HostSessionSeed,
		HostDispatch, HostSend, HostAgent,
	}
}

// Since returns the ABI version that introduced a host function, export or capability (1.0 for
// everything that is not listed as newer). A plugin that declares an older version than the
// name's may not use it: the host rejects it at load, so a plugin's marker always tells the
// truth about what it needs.
func Since(name string) Version {
	switch name {
	case HostAgent, ExportJobs: // CapJobs shares the export's name
		return Version{1, 1}
	case ExportFetch, CapAttachments, CapButtons:
		return Version{1, 2}
	}
	return Version{1, 0}
}

// IsHostFunction reports whether name is a host function of this ABI version.
func IsHostFunction(name string) bool {
	for _, f := range HostFunctions() {
		if f == name {
			return true
		}
	}
	return false
}

// Kinds of plugin.
const (
	KindPlatform  = "platform"  // a chat platform adapter: receives messages, sends replies
	KindScheduler = "scheduler" // a scheduler (cron): ticks and sends into chats through the host
)

// Capabilities a manifest may declare. A capability names an export the host may call or a
// feature the host may use; the host never calls an export whose capability is not declared.
const (
	CapWebhook = "webhook" // inbound HTTP requests are routed to the webhook export
	CapPoll    = "poll"    // the host calls the poll export in a loop for each configured profile
	CapThreads = "threads" // messages may carry a thread id (topics, Slack threads)
	CapEdit    = "edit"    // OutboundMessage.EditMessageID is honoured
	CapTyping  = "typing"  // OutboundMessage.Action "typing" is honoured
	CapReplies = "replies" // OutboundMessage.ReplyTo is honoured
	CapJobs    = "jobs"    // schedulers: the jobs export lists and changes jobs (ABI 1.1)
	// CapAttachments: events and sends may carry attachments, and the fetch export returns an
	// attachment's bytes (ABI 1.2).
	CapAttachments = "attachments"
	// CapButtons: OutboundMessage.Buttons are shown and presses come back as EventCallback
	// (ABI 1.2).
	CapButtons = "buttons"
)

// Length units a manifest may declare for MessageLimit.
const (
	UnitUTF16     = "utf16"     // UTF-16 code units (Telegram)
	UnitCodePoint = "codepoint" // Unicode code points
	UnitByte      = "byte"      // UTF-8 bytes
)
