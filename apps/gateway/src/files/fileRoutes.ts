import {
  ErrorBody,
  FileParams,
  FileQuery,
  TaskParams,
  WorkspaceFileBytes,
  WorkspaceListing,
} from '@troupe/protocol';
import { listWorkspaceFiles, openWorkspaceFile, taskWorkspace, WorkspaceFileError } from '@troupe/runtime';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { GatewayActions } from '../actions.ts';
import type { Principal } from '../auth.ts';
import { GatewayError } from '../gatewayError.ts';
import { contentTypeOf } from './contentType.ts';

/** The largest file served unless the gateway is told otherwise: a report, a page, an image; not a build. */
export const DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024;

export interface FileRoutesOptions {
  actions: GatewayActions;
  /** Who made the request (the gateway's onRequest hook authenticated them). */
  principal(request: FastifyRequest): Principal;
  /**
   * The directory task workspaces are under, `<workspaces>/<pipeline>/<taskId>` (a `troupe up`'s or a worker's
   * `<home>/workspaces`, or a volume they share); undefined: this gateway serves no files.
   */
  workspaces: string | undefined;
  /** The largest file served, in bytes. */
  maxFileBytes: number;
  /** The flag that sets it, named in a refusal: `troupe up --gateway` calls it `--gateway-max-file-size`. */
  maxFileSizeFlag: string;
}

/** Why a file request is refused, with the HTTP status it is answered with. */
const STATUS_OF: Record<WorkspaceFileError['code'], number> = {
  no_workspace: 404,
  path_outside_workspace: 400,
  not_found: 404,
  not_a_file: 404,
};

/**
 * A task's workspace files over HTTP: `GET /v1/tasks/{id}/files` lists them, `GET /v1/tasks/{id}/files/{path}`
 * serves one. Scoped as reading the task is (a token for another pipeline is told there is no such task), confined
 * to the workspace as the file tools are, and served only where this host (or a volume it shares) holds the
 * workspace: elsewhere the answer is 404 `workspace_not_here`, saying where the files are kept.
 */
export const fileRoutes: FastifyPluginAsyncZod<FileRoutesOptions> = async (app, options) => {
  const { actions, principal, maxFileBytes, maxFileSizeFlag } = options;

  /** The task's workspace on this host, once the token may read the task. */
  const workspaceOf = async (request: FastifyRequest, taskId: string) => {
    const record = await actions.readable(principal(request), taskId);
    const where = `workspaces/${record.pipeline}/${record.taskId}`;
    if (options.workspaces === undefined) {
      throw new FileRefusal(
        404,
        'workspace_not_here',
        `this gateway serves no task workspaces: start it with --workspaces <dir> (troupe gateway) on a host that holds them, where a troupe up or troupe worker keeps them as <home>/${where}`,
      );
    }
    return { record, dir: taskWorkspace(options.workspaces, record.pipeline, record.taskId), where };
  };

  /** The refusal of a workspace this host does not hold, saying where it is and how to get at it. */
  const notHere = (taskId: string, where: string) =>
    new FileRefusal(
      404,
      'workspace_not_here',
      `task ${taskId}'s workspace is not on this gateway's host: it is kept where the task's steps ran, as <home>/${where} of that troupe up or troupe worker (a task that has written no file has none). ` +
        `Read it there with troupe files ${taskId}, or serve it with a gateway started there (or on a volume shared with it) with --workspaces <dir>.`,
    );

  app.get(
    '/v1/tasks/:id/files',
    {
      schema: {
        summary:
          'A task’s workspace files: path, size, modification time and content type of each, recursively',
        description:
          'Served where this gateway’s host (or a volume it shares) holds the workspace (`--workspaces`); elsewhere ' +
          '404 `workspace_not_here`. Scoped as reading the task: a token for another pipeline gets 404 `not_found`.',
        params: TaskParams,
        response: { 200: WorkspaceListing, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody },
      },
    },
    async (request, reply) => {
      const { record, dir, where } = await workspaceOf(request, request.params.id);
      try {
        const listing = await listWorkspaceFiles(dir);
        return {
          taskId: record.taskId,
          pipeline: record.pipeline,
          files: listing.files.map((file) => ({
            path: file.path,
            bytes: file.bytes,
            modified: file.modified.toISOString(),
            contentType: contentTypeOf(file.path),
          })),
          omitted: listing.omitted,
          truncated: listing.truncated,
          maxFileBytes,
        };
      } catch (error) {
        return refuse(
          reply,
          WorkspaceFileError.is(error, 'no_workspace') ? notHere(record.taskId, where) : error,
        );
      }
    },
  );

  app.get(
    '/v1/tasks/:id/files/*',
    {
      schema: {
        summary: 'One file of a task’s workspace, as it is, with a content type from its extension',
        description:
          'Confined to the workspace: an absolute path, `..` and a symlink that leads out are refused (400 ' +
          '`path_outside_workspace`). A file over the gateway’s cap (`maxFileBytes` in the listing, 16 MiB unless ' +
          '`--max-file-size` says otherwise) is 413 `too_large`. `?download=true` serves it as an attachment. ' +
          'Elsewhere than the host holding the workspace, 404 `workspace_not_here`.',
        params: FileParams,
        querystring: FileQuery,
        response: {
          200: WorkspaceFileBytes,
          400: ErrorBody,
          401: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
          413: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { record, dir, where } = await workspaceOf(request, request.params.id);
      const requested = request.params['*'];
      let file: Awaited<ReturnType<typeof openWorkspaceFile>>;
      try {
        file = await openWorkspaceFile(dir, requested);
      } catch (error) {
        return refuse(
          reply,
          WorkspaceFileError.is(error, 'no_workspace') ? notHere(record.taskId, where) : error,
        );
      }
      if (file.bytes > maxFileBytes) {
        await file.handle.close();
        return refuse(
          reply,
          new FileRefusal(
            413,
            'too_large',
            `${file.path} is ${mib(file.bytes)}, over this gateway's ${mib(maxFileBytes)} cap on one file: ` +
              `read it on the host that holds the workspace with troupe files ${record.taskId} ${file.path} > ${baseName(file.path)}, ` +
              `or start the gateway with a larger ${maxFileSizeFlag}`,
          ),
        );
      }
      const name = baseName(file.path);
      reply
        .header('content-type', contentTypeOf(file.path))
        .header('content-length', String(file.bytes))
        .header('last-modified', file.modified.toUTCString())
        // A page an agent wrote must not run as the gateway's own (its dashboard holds tokens): no script, no
        // origin of ours, no sniffing a type other than the one given.
        .header(
          'content-security-policy',
          "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox",
        )
        .header('x-content-type-options', 'nosniff')
        .header(
          'content-disposition',
          `${request.query.download ? 'attachment' : 'inline'}; filename*=UTF-8''${extValue(name)}`,
        );
      if (file.bytes === 0) {
        await file.handle.close();
        return reply.send(Buffer.alloc(0));
      }
      // No more than the size announced, should the file grow meanwhile; the stream closes the file when it ends or
      // the client goes.
      const body = file.handle.createReadStream({ start: 0, end: file.bytes - 1 });
      // Cut shorter meanwhile (a command rewriting it in place): the connection is closed, which the client sees as a
      // failed download, rather than kept open waiting for the bytes Content-Length promised.
      body.once('end', () => {
        if (body.bytesRead < file.bytes) reply.raw.destroy();
      });
      return reply.send(body);
    },
  );
};

/** A file request refused, with its status and code (`statusCode`: the gateway's error handler answers it so too). */
class FileRefusal extends GatewayError {
  override readonly name = 'FileRefusal';

  constructor(statusCode: number, code: 'workspace_not_here' | 'too_large', message: string) {
    super(code, statusCode, message);
  }
}

/**
 * Answers a refusal here, with its own code (the gateway's error handler would name every 400 `invalid_request`);
 * anything else goes on to the gateway's handler (a task not known: 404 `not_found`; a fault: 500).
 */
function refuse(reply: FastifyReply, error: unknown): FastifyReply {
  if (error instanceof FileRefusal)
    return reply.code(error.statusCode).send({ error: { code: error.code, message: error.message } });
  if (WorkspaceFileError.is(error)) {
    return reply.code(STATUS_OF[error.code]).send({ error: { code: error.code, message: error.message } });
  }
  throw error;
}

/**
 * A file name as RFC 8187 writes it in `filename*`: `encodeURIComponent` leaves `'`, `(`, `)` and `*`, which that value
 * may not hold unencoded.
 */
const extValue = (name: string) =>
  encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

const baseName = (relative: string) => relative.split('/').at(-1) ?? relative;

/** A size in MiB, with its exact bytes when the rounding would hide them (16 MiB + 1 byte is not "16 MiB"). */
const mib = (bytes: number) => {
  if (bytes < 1024 * 1024) return `${bytes} bytes`;
  const rounded = (bytes / (1024 * 1024)).toFixed(1).replace(/\.0$/, '');
  return Number(rounded) * 1024 * 1024 === bytes ? `${rounded} MiB` : `${bytes} bytes (${rounded} MiB)`;
};
