import type {
	IDataObject,
	INodeType,
	INodeTypeDescription,
	IWebhookFunctions,
	IWebhookResponseData,
} from 'n8n-workflow';

import { DEFAULT_TOLERANCE_SECONDS, parseSecrets, verify } from './verify';

/** What oncegate tells about a forward, from its headers. */
function delivery(headers: Record<string, unknown>, id: string, timestamp: number): IDataObject {
	const text = (name: string) => {
		const value = headers[name];
		return typeof value === 'string' ? value : undefined;
	};
	const version = text('x-oncegate-version');
	return {
		webhook_id: id,
		timestamp,
		namespace: text('x-oncegate-namespace'),
		key: text('x-oncegate-key'),
		version: version !== undefined && /^\d+$/.test(version) ? Number(version) : version,
		correlation_id: text('x-correlation-id'),
		source: text('x-oncegate-source'),
		event_id: text('x-oncegate-event-id'),
		event_type: text('x-oncegate-event-type'),
		idempotency_key: text('idempotency-key'),
	};
}

export class OncegateTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Oncegate Trigger',
		name: 'oncegateTrigger',
		icon: 'file:oncegate.svg',
		group: ['trigger'],
		version: 1,
		subtitle: '={{"/" + $parameter["path"]}}',
		description:
			'Starts the workflow on a forward from oncegate, after checking its Standard Webhooks signature',
		defaults: {
			name: 'Oncegate Trigger',
		},
		inputs: [],
		outputs: ['main'],
		credentials: [
			{
				name: 'oncegateSigningApi',
				required: true,
			},
		],
		webhooks: [
			{
				name: 'default',
				httpMethod: 'POST',
				responseMode: '={{$parameter["responseMode"]}}',
				path: '={{$parameter["path"]}}',
				isFullPath: true,
			},
		],
		properties: [
			{
				displayName: 'Path',
				name: 'path',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'og-orders',
				description:
					'The webhook path: the source\'s path in oncegate\'s config without the leading slash (the target\'s base_url ends in /webhook)',
			},
			{
				displayName: 'Respond',
				name: 'responseMode',
				type: 'options',
				options: [
					{
						name: 'Immediately',
						value: 'onReceived',
						description: 'Answer 200 as soon as the signature checks out',
					},
					{
						name: 'When Last Node Finishes',
						value: 'lastNode',
						description: 'Answer with the last node\'s output; a failed execution answers 500 and oncegate retries',
					},
					{
						name: 'Using \'Respond to Webhook\' Node',
						value: 'responseNode',
						description:
							'Answer after the commit: oncegate retries a forward that is not acknowledged with a 2xx',
					},
				],
				default: 'responseNode',
			},
			{
				displayName: 'Tolerance (Seconds)',
				name: 'toleranceSeconds',
				type: 'number',
				typeOptions: { minValue: 1 },
				default: DEFAULT_TOLERANCE_SECONDS,
				description:
					'A forward whose webhook-timestamp is further than this from n8n\'s clock is refused as a replay',
			},
		],
	};

	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		const req = this.getRequestObject();
		const res = this.getResponseObject();
		const headers = this.getHeaderData() as Record<string, string | string[] | undefined>;
		const credentials = await this.getCredentials('oncegateSigningApi');
		const secrets = parseSecrets(String(credentials.secrets ?? ''));
		const tolerance = this.getNodeParameter('toleranceSeconds', DEFAULT_TOLERANCE_SECONDS) as number;
		const raw = (req as unknown as { rawBody?: Buffer }).rawBody;
		const body = Buffer.isBuffer(raw) ? raw : Buffer.from(typeof raw === 'string' ? raw : '');
		let verdict;
		try {
			verdict = verify(secrets, headers, body, Math.floor(Date.now() / 1000), tolerance);
		} catch (error) {
			verdict = { ok: false as const, reason: (error as Error).message };
		}
		if (!verdict.ok) {
			// Refused before any execution starts: nothing runs, nothing is stored.
			this.logger.warn(`Oncegate Trigger refused a request: ${verdict.reason}`);
			res.status(401).json({ error: 'signature refused', reason: verdict.reason });
			return { noWebhookResponse: true };
		}
		let parsed: unknown = this.getBodyData();
		const type = String(headers['content-type'] ?? '');
		if (type.includes('json') && body.length > 0) {
			try {
				parsed = JSON.parse(body.toString('utf8'));
			} catch {
				parsed = this.getBodyData();
			}
		}
		return {
			workflowData: [
				this.helpers.returnJsonArray({
					body: parsed as IDataObject,
					headers: headers as IDataObject,
					query: this.getQueryData() as IDataObject,
					delivery: delivery(headers, verdict.id, verdict.timestamp),
				}),
			],
		};
	}
}
