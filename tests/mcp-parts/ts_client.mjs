#!/usr/bin/env node
// An MCP caller written with the official TypeScript SDK (@modelcontextprotocol/sdk 1.x Client),
// for pg_idempotency's MCP proxy trials. Same command line and output as py_client.py.
//
//   node ts_client.mjs (--http URL | --stdio -- CMD ARGS...) [--header 'K: V']... [--timeout S] [--progress]
//       ( --list
//       | --tool NAME [--args JSON] [--meta JSON] [--repeat N]
//       | --calls FILE )
//
// --stdio starts CMD with this process's whole environment (the SDK would pass only a safe
// subset), so COUNTING_LOG and friends reach the server. --header adds an HTTP header to every
// request of the HTTP transport. --meta is sent as the tools/call request's `_meta` (the SDK
// sends params._meta as given, adding progressToken to it when --progress asks for progress).
// --calls FILE: one JSON object a line, {"tool": ..., "args": {...}, "meta": {...}}, all in one
// session. --timeout: seconds to wait for each call's answer (default 60; connecting and --list
// wait at least 30). --progress: ask for progress notifications and print each as
// {"progress": {...}} before the call's line.
//
// Output (stdout), one JSON line per call: the CallToolResult as the SDK gives it (already the
// wire shape: content, structuredContent, isError, _meta), or {"error": {"code", "message",
// "data"}} when the server answered with a JSON-RPC error (the message without the SDK's
// "MCP error N: " prefix). --list prints the tools/list result as one line. Exit 0 when every
// call got an answer (a tool error or a JSON-RPC error is an answer); 2 when the server cannot
// be reached or the connection fails, with the reason on stderr; 64 on a bad command line.
//
// The SDK is loaded from MCP_NODE_DIR (default: node/ beside this file), where
// scripts/mcp-parts.sh installs it.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const nodeDir = process.env.MCP_NODE_DIR || join(dirname(fileURLToPath(import.meta.url)), 'node');
const sdk = (p) => import(pathToFileURL(join(nodeDir, 'node_modules/@modelcontextprotocol/sdk/dist/esm', p)).href);

function usage(msg) {
    process.stderr.write(`ts_client: ${msg}\n`);
    process.exit(64);
}

function parseArgs(argv) {
    const a = { headers: {}, repeat: 1, args: '{}', timeout: 60, serverCmd: [] };
    const dd = argv.indexOf('--');
    if (dd >= 0) {
        a.serverCmd = argv.slice(dd + 1);
        argv = argv.slice(0, dd);
    }
    for (let i = 0; i < argv.length; i++) {
        const flag = argv[i];
        const val = () => {
            if (i + 1 >= argv.length) usage(`${flag} needs a value`);
            return argv[++i];
        };
        switch (flag) {
            case '--http': a.http = val(); break;
            case '--stdio': a.stdio = true; break;
            case '--tool': a.tool = val(); break;
            case '--args': a.args = val(); break;
            case '--meta': a.meta = val(); break;
            case '--repeat': a.repeat = Number.parseInt(val(), 10); break;
            case '--list': a.list = true; break;
            case '--calls': a.calls = val(); break;
            case '--timeout': a.timeout = Number.parseFloat(val()); break;
            case '--progress': a.progress = true; break;
            case '--header': {
                const h = val();
                const c = h.indexOf(':');
                if (c < 0) usage(`--header wants 'Name: value', got '${h}'`);
                a.headers[h.slice(0, c).trim()] = h.slice(c + 1).trim();
                break;
            }
            default: usage(`unknown argument '${flag}'`);
        }
    }
    if (!!a.http === !!a.stdio) usage('give exactly one of --http URL or --stdio -- CMD ARGS...');
    if (a.stdio && a.serverCmd.length === 0) usage('--stdio needs the server command after --');
    if ([!!a.tool, !!a.list, !!a.calls].filter(Boolean).length !== 1) usage('give exactly one of --tool NAME, --list or --calls FILE');
    try {
        if (a.tool) {
            const call = { tool: a.tool, args: JSON.parse(a.args), meta: a.meta ? JSON.parse(a.meta) : undefined };
            a.callList = Array.from({ length: a.repeat }, () => call);
        } else if (a.calls) {
            a.callList = readFileSync(a.calls, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
        }
    } catch (e) {
        usage(`bad --args/--meta/--calls: ${e.message}`);
    }
    return a;
}

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

class ConnectionLost extends Error {}

async function main() {
    const a = parseArgs(process.argv.slice(2));
    const [{ Client }, { McpError, ErrorCode }] = await Promise.all([sdk('client/index.js'), sdk('types.js')]);

    let transport;
    if (a.http) {
        const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
        transport = new StreamableHTTPClientTransport(new URL(a.http), { requestInit: { headers: a.headers } });
    } else {
        const { StdioClientTransport } = await sdk('client/stdio.js');
        transport = new StdioClientTransport({
            command: a.serverCmd[0],
            args: a.serverCmd.slice(1),
            env: { ...process.env },
            stderr: 'inherit',
        });
        // The client hands the negotiated version to transports that take it (HTTP does, for its
        // mcp-protocol-version header); let the stdio one keep it too, for the line on stderr.
        transport.setProtocolVersion = (v) => { transport.protocolVersion = v; };
    }
    const client = new Client({ name: 'pg-idempotency-ts-client', version: '1.0.0' }, { capabilities: {} });
    let closed = false;
    client.onclose = () => { closed = true; };
    // A response stream that breaks before its response does not fail the request in this SDK
    // (1.32: it reports "SSE stream disconnected" to onerror, reconnects only a resumable
    // stream, and lets the request wait for its timeout); so the driver ends the call itself.
    let lost = null;
    let pending = null;
    client.onerror = (e) => {
        const m = e?.message ?? String(e);
        if (/^SSE stream disconnected|^Failed to reconnect SSE stream|^Maximum reconnection attempts/.test(m)) {
            lost = m;
            pending?.abort(new ConnectionLost(m));
        }
    };

    try {
        await client.connect(transport, { timeout: Math.max(a.timeout, 30) * 1000 });
    } catch (e) {
        throw new ConnectionLost(e?.message ?? String(e));
    }
    process.stderr.write(`ts_client: protocol ${transport.protocolVersion}\n`);
    try {
        if (a.list) {
            emit(await client.listTools(undefined, { timeout: Math.max(a.timeout, 30) * 1000 }));
            return;
        }
        for (const call of a.callList) {
            const params = { name: call.tool, arguments: call.args ?? {} };
            if (call.meta != null) params._meta = call.meta;
            pending = new AbortController();
            const options = { timeout: a.timeout * 1000, signal: pending.signal };
            if (a.progress) options.onprogress = (p) => emit({ progress: { progress: p.progress, total: p.total ?? null, message: p.message ?? null } });
            try {
                emit(await client.callTool(params, undefined, options));
            } catch (e) {
                if (lost) throw new ConnectionLost(lost);
                if (!(e instanceof McpError)) throw new ConnectionLost(e?.message ?? String(e));
                if (e.code === ErrorCode.ConnectionClosed && closed) throw new ConnectionLost('the server closed the connection');
                const error = { code: e.code, message: e.message.replace(/^MCP error -?\d+: /, '') };
                if (e.data !== undefined) error.data = e.data;
                emit({ error });
            }
        }
    } finally {
        await client.close().catch(() => {});
    }
}

main().then(
    () => process.exit(0),
    (e) => {
        process.stderr.write(`ts_client: connection failed: ${e?.message ?? e}\n`);
        process.exit(2);
    },
);
