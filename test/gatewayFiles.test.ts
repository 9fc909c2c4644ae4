import { mkdir, readFile, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { submitToPipeline } from '@troupe/client';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePath, type Harness, startHarness } from './support/harness.ts';

const TOKENS = {
  admin: 'admin-token-0123456789abcdef',
  reader: 'reader-token-0123456789abcdef',
  demoReader: 'demo-reader-token-0123456789a',
  elsewhere: 'elsewhere-token-0123456789abc',
};

/** A task's workspace files over HTTP: listed, served with a type, capped, confined, scoped, and said to be elsewhere. */
describe('the gateway: a task’s workspace files', () => {
  let h: Harness;
  let gateway: Gateway;
  /** A gateway on a host that holds no workspaces. */
  let remote: Gateway;
  const taskId = 'gw-files-1';
  let workspace: string;
  const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0xff]);

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')]);
    const tokens = new TokenStore([
      { name: 'ops', sha256: hashToken(TOKENS.admin), scopes: ['admin'] },
      { name: 'watcher', sha256: hashToken(TOKENS.reader), scopes: ['read'] },
      { name: 'demo-watcher', sha256: hashToken(TOKENS.demoReader), scopes: ['read'], pipelines: ['demo'] },
      { name: 'other-team', sha256: hashToken(TOKENS.elsewhere), scopes: ['submit'], pipelines: ['ledger'] },
    ]);
    const logger = createLogger({ level: 'silent' });
    gateway = await startGateway({
      bus: h.bus,
      logger,
      tokens,
      port: 0,
      workspaces: h.workspaceRoot,
      maxFileBytes: 1024,
      dashboardDir: false,
      a2aPush: false,
    });
    remote = await startGateway({ bus: h.bus, logger, tokens, port: 0, dashboardDir: false, a2aPush: false });

    await submitToPipeline(h.bus, 'demo', { id: taskId, goal: 'Write a short hello note in notes/hello.md' });
    expect((await h.finalOf(taskId, 60_000)).kind).toBe('task.completed');
    // What other tools could have left beside the demo's note: nested files, binaries, links, a dependency tree.
    workspace = join(h.workspaceRoot, 'demo', taskId);
    await mkdir(join(workspace, 'nested', 'deep'), { recursive: true });
    await writeFile(join(workspace, 'nested', 'deep', 'data.json'), '{"ok":true}\n');
    await writeFile(join(workspace, 'chart.png'), PNG);
    await writeFile(join(workspace, 'blob.bin'), Buffer.from([0, 1, 2, 3]));
    await writeFile(join(workspace, 'big.txt'), 'x'.repeat(2048));
    await writeFile(join(workspace, 'empty.txt'), '');
    await writeFile(join(workspace, 'name with spaces & ü.md'), '# spaced\n');
    await writeFile(join(workspace, 'it\'s "(1)"*\r\nX-Injected: 1.txt'), 'odd\n');
    await mkdir(join(workspace, 'node_modules', 'left-pad'), { recursive: true });
    await writeFile(join(workspace, 'node_modules', 'left-pad', 'index.js'), 'module.exports = 1;\n');
    await symlink('/etc/hostname', join(workspace, 'leak.txt'));
    await symlink('/etc', join(workspace, 'escape'));
    await symlink('notes/hello.md', join(workspace, 'latest.md'));
  }, 90_000);

  afterAll(async () => {
    await gateway?.close();
    await remote?.close();
    await h?.stop();
  });

  const get = async (path: string, token: keyof typeof TOKENS | null = 'admin', at = gateway) => {
    const response = await fetch(`${at.url}${path}`, {
      headers: token ? { authorization: `Bearer ${TOKENS[token]}` } : {},
    });
    const bytes = Buffer.from(await response.arrayBuffer());
    const isJson = response.headers.get('content-type')?.startsWith('application/json') ?? false;
    return {
      status: response.status,
      headers: response.headers,
      bytes,
      body: isJson && bytes.length > 0 ? JSON.parse(bytes.toString('utf8')) : undefined,
    };
  };

  /** A request whose path no client library has normalised: `..` reaches the gateway as it was written. */
  const raw = (path: string) =>
    new Promise<{ status: number; body: { error: { code: string; message: string } } }>((resolve, reject) => {
      const url = new URL(gateway.url);
      const req = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path,
          headers: { authorization: `Bearer ${TOKENS.admin}` },
        },
        (res) => {
          let text = '';
          res.on('data', (chunk) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
        },
      );
      req.on('error', reject);
      req.end();
    });

  it('lists the files recursively with size, time and content type, and names what it left out', async () => {
    const listing = await get(`/v1/tasks/${taskId}/files`, 'reader');
    expect(listing.status).toBe(200);
    expect(listing.body).toMatchObject({ taskId, pipeline: 'demo', truncated: false, maxFileBytes: 1024 });
    const paths = listing.body.files.map((f: { path: string }) => f.path);
    expect(paths).toEqual([
      'big.txt',
      'blob.bin',
      'chart.png',
      'empty.txt',
      'it\'s "(1)"*\r\nX-Injected: 1.txt',
      'name with spaces & ü.md',
      'nested/deep/data.json',
      'notes/hello.md',
    ]);
    const hello = listing.body.files.find((f: { path: string }) => f.path === 'notes/hello.md');
    const onDisk = await readFile(join(workspace, 'notes', 'hello.md'));
    expect(hello).toMatchObject({ bytes: onDisk.length, contentType: 'text/markdown; charset=utf-8' });
    expect(Date.parse(hello.modified)).toBeGreaterThan(Date.now() - 5 * 60_000);
    expect(listing.body.omitted).toEqual([
      { path: 'escape', reason: 'symlink' },
      { path: 'latest.md', reason: 'symlink' },
      { path: 'leak.txt', reason: 'symlink' },
      { path: 'node_modules', reason: 'tool_directory' },
    ]);
  });

  it('serves a file as it is, with the content type of its extension and headers that keep it inert', async () => {
    const hello = await get(`/v1/tasks/${taskId}/files/notes/hello.md`, 'reader');
    expect(hello.status).toBe(200);
    expect(hello.headers.get('content-type')).toBe('text/markdown; charset=utf-8');
    expect(hello.bytes.equals(await readFile(join(workspace, 'notes', 'hello.md')))).toBe(true);
    expect(hello.headers.get('content-security-policy')).toContain('sandbox');
    expect(hello.headers.get('x-content-type-options')).toBe('nosniff');
    expect(hello.headers.get('content-disposition')).toBe("inline; filename*=UTF-8''hello.md");

    const json = await get(`/v1/tasks/${taskId}/files/nested/deep/data.json`);
    expect(json.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(json.bytes.toString()).toBe('{"ok":true}\n');
    const png = await get(`/v1/tasks/${taskId}/files/chart.png`);
    expect(png.headers.get('content-type')).toBe('image/png');
    expect(png.bytes.equals(PNG)).toBe(true);
    const blob = await get(`/v1/tasks/${taskId}/files/blob.bin?download=true`);
    expect(blob.headers.get('content-type')).toBe('application/octet-stream');
    expect(blob.headers.get('content-disposition')).toBe("attachment; filename*=UTF-8''blob.bin");
    expect([...blob.bytes]).toEqual([0, 1, 2, 3]);
    const empty = await get(`/v1/tasks/${taskId}/files/empty.txt`);
    expect(empty).toMatchObject({ status: 200 });
    expect(empty.bytes.length).toBe(0);
    const spaced = await get(`/v1/tasks/${taskId}/files/${encodeURIComponent('name with spaces & ü.md')}`);
    expect(spaced.bytes.toString()).toBe('# spaced\n');
    // A name's quotes, parentheses and line breaks stay inside the header's one value, encoded as RFC 8187 has it.
    const odd = await get(
      `/v1/tasks/${taskId}/files/${encodeURIComponent('it\'s "(1)"*\r\nX-Injected: 1.txt')}`,
    );
    expect(odd.bytes.toString()).toBe('odd\n');
    expect(odd.headers.get('x-injected')).toBeNull();
    expect(odd.headers.get('content-disposition')).toBe(
      "inline; filename*=UTF-8''it%27s%20%22%281%29%22%2A%0D%0AX-Injected%3A%201.txt",
    );
    // A link that stays inside the workspace is followed.
    const latest = await get(`/v1/tasks/${taskId}/files/latest.md`);
    expect(latest.status).toBe(200);
    expect(latest.bytes.equals(hello.bytes)).toBe(true);
  });

  it('refuses a file over the cap with 413, naming the cap and how to get it otherwise', async () => {
    const big = await get(`/v1/tasks/${taskId}/files/big.txt`);
    expect(big.status).toBe(413);
    expect(big.body.error.code).toBe('too_large');
    expect(big.body.error.message).toContain('big.txt is 2048 bytes');
    expect(big.body.error.message).toContain('1024 bytes cap');
    expect(big.body.error.message).toContain(`troupe files ${taskId} big.txt > big.txt`);
    expect(big.body.error.message).toContain('--max-file-size');
  });

  it('closes the connection when a file is cut shorter while it is sent, rather than leave the client waiting', async () => {
    // A command that rewrites a file in place (`> file`) while a client downloads it: fewer bytes than announced.
    const roomy = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([{ name: 'ops', sha256: hashToken(TOKENS.admin), scopes: ['admin'] }]),
      port: 0,
      workspaces: h.workspaceRoot,
      maxFileBytes: 64 * 1024 * 1024,
      dashboardDir: false,
      a2aPush: false,
    });
    const file = join(workspace, 'shrinking.bin');
    // Larger than the socket buffers hold, so the gateway is still reading when the file is cut.
    const bytes = 32 * 1024 * 1024;
    await writeFile(file, Buffer.alloc(bytes, 7));
    try {
      const outcome = await new Promise<string>((resolve) => {
        const url = new URL(roomy.url);
        const req = httpRequest(
          {
            host: url.hostname,
            port: url.port,
            path: `/v1/tasks/${taskId}/files/shrinking.bin`,
            headers: { authorization: `Bearer ${TOKENS.admin}` },
          },
          (res) => {
            let received = 0;
            res.pause();
            void truncate(file, 10).then(() => res.resume());
            res.on('data', (chunk: Buffer) => (received += chunk.length));
            res.on('end', () => resolve(`ended with ${received} of ${res.headers['content-length']} bytes`));
            res.on('error', () => resolve(`failed after ${received} bytes`));
          },
        );
        // Far longer than a closed connection takes to be seen; the gateway's keep-alive would hold it 72 s.
        req.setTimeout(20_000, () => req.destroy(new Error('still waiting')));
        req.on('error', (error) => resolve(`request: ${error.message}`));
        req.end();
      });
      expect(outcome).toMatch(/^failed after \d+ bytes$|^request: (aborted|socket hang up)$/);
      expect(outcome).not.toContain(String(bytes));
      // The gateway serves on.
      expect((await get(`/v1/tasks/${taskId}/files/notes/hello.md`, 'admin', roomy)).status).toBe(200);
    } finally {
      await roomy.close();
      await rm(file, { force: true });
    }
  }, 60_000);

  it('refuses paths that leave the workspace: .., encoded .., absolute, and symlinks that lead out', async () => {
    for (const path of [
      `/v1/tasks/${taskId}/files/../../../../etc/passwd`,
      `/v1/tasks/${taskId}/files/notes/../../../etc/passwd`,
      `/v1/tasks/${taskId}/files/..%2F..%2F..%2Fetc%2Fpasswd`,
      `/v1/tasks/${taskId}/files/%252e%252e%252f%252e%252e%252fetc%252fpasswd`,
      `/v1/tasks/${taskId}/files//etc/passwd`,
      `/v1/tasks/${taskId}/files/leak.txt`,
      `/v1/tasks/${taskId}/files/escape/hostname`,
    ]) {
      const refused = await raw(path);
      expect(refused.status, path).toBe(400);
      expect(refused.body.error.code, path).toBe('path_outside_workspace');
    }
    const link = await get(`/v1/tasks/${taskId}/files/leak.txt`);
    expect(link).toMatchObject({ status: 400, body: { error: { code: 'path_outside_workspace' } } });
    expect(link.body.error.message).toContain('leads outside the workspace through a symlink');
    // The workspace's place on the server's disk is not told.
    expect(link.body.error.message).not.toContain(h.workspaceRoot);
    const encoded = await get(`/v1/tasks/${taskId}/files/..%2F..%2Fetc%2Fpasswd`);
    expect(encoded).toMatchObject({ status: 400, body: { error: { code: 'path_outside_workspace' } } });
  });

  it('answers a missing file 404 not_found and a directory 404 not_a_file', async () => {
    const missing = await get(`/v1/tasks/${taskId}/files/notes/nope.md`);
    expect(missing).toMatchObject({ status: 404, body: { error: { code: 'not_found' } } });
    const dir = await get(`/v1/tasks/${taskId}/files/nested`);
    expect(dir).toMatchObject({ status: 404, body: { error: { code: 'not_a_file' } } });
    expect(dir.body.error.message).toContain('is a directory');
  });

  it('is scoped as reading the task is: a token for another pipeline is told there is no such task', async () => {
    const asTask = await get(`/v1/tasks/${taskId}`, 'elsewhere');
    expect(asTask.status).toBe(404);
    for (const path of [`/v1/tasks/${taskId}/files`, `/v1/tasks/${taskId}/files/notes/hello.md`]) {
      const refused = await get(path, 'elsewhere');
      expect(refused.status, path).toBe(asTask.status);
      expect(refused.body.error, path).toEqual(asTask.body.error);
      expect((await get(path, 'demoReader')).status, path).toBe(200);
      expect((await get(path, null)).status, path).toBe(401);
    }
    const unknown = await get('/v1/tasks/no-such-task/files');
    expect(unknown).toMatchObject({ status: 404, body: { error: { code: 'not_found' } } });
  });

  it('says workspace_not_here, and where the files are, when this host does not hold the workspace', async () => {
    const elsewhere = await get(`/v1/tasks/${taskId}/files`, 'admin', remote);
    expect(elsewhere).toMatchObject({ status: 404, body: { error: { code: 'workspace_not_here' } } });
    expect(elsewhere.body.error.message).toContain('--workspaces');
    const file = await get(`/v1/tasks/${taskId}/files/notes/hello.md`, 'admin', remote);
    expect(file).toMatchObject({ status: 404, body: { error: { code: 'workspace_not_here' } } });

    // A task whose workspace is not on this host's disk (its steps ran on another, or it was removed).
    const gone = 'gw-files-gone';
    await submitToPipeline(h.bus, 'demo', { id: gone, goal: 'Write a short hello note in notes/hello.md' });
    await h.finalOf(gone, 60_000);
    await rm(join(h.workspaceRoot, 'demo', gone), { recursive: true, force: true });
    for (const path of [`/v1/tasks/${gone}/files`, `/v1/tasks/${gone}/files/notes/hello.md`]) {
      const notHere = await get(path);
      expect(notHere, path).toMatchObject({ status: 404, body: { error: { code: 'workspace_not_here' } } });
      expect(notHere.body.error.message).toContain(`troupe files ${gone}`);
      expect(notHere.body.error.message).toContain(`workspaces/demo/${gone}`);
    }
  }, 90_000);

  it('puts both routes in the OpenAPI document, with the listing’s schema', async () => {
    const doc = (await get('/openapi.json', null)).body;
    const paths = Object.keys(doc.paths);
    expect(paths).toContain('/v1/tasks/{id}/files');
    expect(paths).toContain('/v1/tasks/{id}/files/{*}');
    expect(doc.components.schemas.WorkspaceListing).toBeDefined();
    expect(doc.components.schemas.WorkspaceFile.properties).toHaveProperty('contentType');
  });
});
