import { Kernel, KernelMessage } from '@jupyterlab/services';
import type { JSONObject } from '@lumino/coreutils';

/** How long a subshell made for an opening waits for the kernel's first answer before it goes. */
const ANSWER_WITHIN_MS = 30_000;

/**
 * Open `comm` with `data` on a subshell of its own, so that a kernel whose main shell is running a
 * cell (one waiting on a launch, say) answers at once; the subshell is deleted once `answered`
 * settles (the kernel's first message on the comm, or its close), or after 30 s.
 *
 * JupyterLab itself puts a comm on a subshell only once it knows the kernel has them, from the
 * kernel's info; a page loaded while a cell runs gets that info only when the cell ends, so its
 * comm opened on the main shell and waited behind the cell ("Connecting to the kernel…" for the
 * whole of a launch after a reload). The subshell is asked for here on the control channel, which
 * the kernel answers while the cell runs. A kernel without subshells (ipykernel < 7) never answers
 * that request, and says so in its info: then the comm opens on the main shell, as before.
 *
 * Example:
 *   const comm = kernel.createComm('notebook_launcher');
 *   void openBesideTheCell(kernel, comm, { type: 'get_state' }, firstAnswer);
 */
export async function openBesideTheCell(
  kernel: Kernel.IKernelConnection,
  comm: Kernel.IComm,
  data: JSONObject,
  answered: Promise<void>
): Promise<void> {
  const request = KernelMessage.createMessage({
    msgType: 'create_subshell_request',
    channel: 'control',
    session: kernel.clientId,
    username: kernel.username,
    content: {}
  });
  const creating = kernel.sendControlMessage(request, true, true);
  const made = creating.done.then(
    reply => {
      const content = reply.content as { status?: string; subshell_id?: string };
      return content.status === 'ok' && content.subshell_id ? content.subshell_id : null;
    },
    () => null
  );
  // resolves (null) only when the kernel's info says it has no subshells
  const without = kernel.info.then(
    () => (kernel.supportsSubshells ? new Promise<null>(() => undefined) : null),
    () => null
  );
  const subshell = await Promise.race([made, without]);
  if (comm.isDisposed || kernel.isDisposed) {
    return;
  }
  if (subshell === null) {
    creating.dispose();
    comm.open(data);
    return;
  }
  const open = KernelMessage.createMessage({
    msgType: 'comm_open',
    channel: 'shell',
    session: kernel.clientId,
    username: kernel.username,
    subshellId: subshell,
    content: { comm_id: comm.commId, target_name: comm.targetName, data }
  });
  kernel.sendShellMessage(open, false, true);
  let timer = 0;
  const waited = new Promise<void>(resolve => {
    timer = window.setTimeout(resolve, ANSWER_WITHIN_MS);
  });
  await Promise.race([answered, waited]);
  window.clearTimeout(timer);
  if (!kernel.isDisposed) {
    const remove = KernelMessage.createMessage({
      msgType: 'delete_subshell_request',
      channel: 'control',
      session: kernel.clientId,
      username: kernel.username,
      content: { subshell_id: subshell }
    });
    kernel.sendControlMessage(remove, true, true);
  }
}
