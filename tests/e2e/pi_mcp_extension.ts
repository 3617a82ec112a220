/**
 * A pi extension that gives pi the tools of MCP stdio servers (pi has no MCP client of its own).
 *
 * PI_MCP_CONFIG names a JSON file `{"mcpServers": {NAME: {"command": ..., "args": [...]}}}` (the
 * shape Claude Code's --mcp-config takes). Each server is started once, asked for its tools
 * (`initialize`, `notifications/initialized`, `tools/list`: newline-delimited JSON-RPC 2.0 on
 * stdio, the MCP stdio transport), and every tool is registered as `mcp__<server>__<tool>` with
 * the server's own input schema (pi validates plain JSON Schema); a call goes to `tools/call`.
 *
 *     PI_MCP_CONFIG=mcp.json pi -e tests/e2e/pi_mcp_extension.ts -p "..."
 */

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";

/** Milliseconds a server may take to answer one request before the call fails. */
const TIMEOUT_MS = 60_000;

interface McpTool {
	name: string;
	description?: string;
	inputSchema?: Record<string, unknown>;
}

/** One MCP server process and its pending JSON-RPC requests (answers are matched by id). */
class StdioClient {
	private nextId = 1;
	private pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
	private proc: ChildProcessWithoutNullStreams;

	constructor(readonly name: string, command: string, args: string[]) {
		this.proc = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"] });
		this.proc.stderr.resume(); // a server's log must not fill the pipe and stall it
		this.proc.on("exit", (code) => this.failAll(new Error(`MCP server ${name} exited (${code})`)));
		this.proc.on("error", (err) => this.failAll(err));
		createInterface({ input: this.proc.stdout }).on("line", (line) => {
			let msg: any;
			try {
				msg = JSON.parse(line);
			} catch {
				return; // not a JSON-RPC message (the transport allows only those on stdout)
			}
			const waiter = typeof msg?.id === "number" ? this.pending.get(msg.id) : undefined;
			if (!waiter) return; // a notification or a request of the server's: nothing here asks for those
			this.pending.delete(msg.id);
			if (msg.error) waiter.reject(new Error(`${this.name}: ${msg.error.message ?? JSON.stringify(msg.error)}`));
			else waiter.resolve(msg.result);
		});
	}

	request(method: string, params: Record<string, unknown> = {}): Promise<any> {
		const id = this.nextId++;
		return new Promise((resolve, reject) => {
			const timer = setTimeout(() => {
				this.pending.delete(id);
				reject(new Error(`${this.name}: ${method} timed out`));
			}, TIMEOUT_MS);
			this.pending.set(id, {
				resolve: (v) => (clearTimeout(timer), resolve(v)),
				reject: (e) => (clearTimeout(timer), reject(e)),
			});
			this.proc.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
		});
	}

	notify(method: string): void {
		this.proc.stdin.write(JSON.stringify({ jsonrpc: "2.0", method }) + "\n");
	}

	close(): void {
		this.proc.stdin.end();
		this.proc.kill();
	}

	private failAll(err: Error): void {
		for (const waiter of this.pending.values()) waiter.reject(err);
		this.pending.clear();
	}
}

export default async function mcpTools(pi: ExtensionAPI): Promise<void> {
	const path = process.env.PI_MCP_CONFIG;
	if (!path) return;
	const servers: Record<string, { command: string; args?: string[] }> =
		JSON.parse(readFileSync(path, "utf8")).mcpServers ?? {};
	const clients: StdioClient[] = [];
	const closeAll = () => clients.forEach((c) => c.close());
	pi.on("session_shutdown", closeAll);
	process.once("exit", closeAll); // print mode exits without a shutdown event on some paths

	// Async factory: pi waits for it, so every tool is registered before the first request.
	await Promise.all(
		Object.entries(servers).map(async ([server, spec]) => {
			const client = new StdioClient(server, spec.command, spec.args ?? []);
			clients.push(client);
			await client.request("initialize", {
				protocolVersion: "2025-06-18",
				capabilities: {},
				clientInfo: { name: "pi-mcp-extension", version: "1.0.0" },
			});
			client.notify("notifications/initialized");
			const { tools } = (await client.request("tools/list")) as { tools: McpTool[] };
			for (const tool of tools) {
				pi.registerTool({
					name: `mcp__${server}__${tool.name}`,
					label: `${server}: ${tool.name}`,
					description: tool.description ?? tool.name,
					parameters: (tool.inputSchema ?? { type: "object", properties: {} }) as any,
					async execute(_id, params) {
						const result = await client.request("tools/call", { name: tool.name, arguments: params ?? {} });
						const content = (result?.content ?? []).map((c: any) =>
							c.type === "text" ? { type: "text", text: c.text } : { type: "text", text: JSON.stringify(c) },
						);
						if (result?.isError) throw new Error(content.map((c: any) => c.text).join("\n"));
						return { content, details: { server, tool: tool.name } };
					},
				});
			}
		}),
	);
}
